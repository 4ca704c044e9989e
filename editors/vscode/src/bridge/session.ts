/**
 * Runs on a bridge connection, without the `vscode` module: sends pi/run, folds the run's pi/message
 * notifications into a RunRecord the view renders, and turns the answer (or the -32800 of a
 * cancelled run) into the record's final state. Works on a LanguageClient and on a bare
 * vscode-jsonrpc MessageConnection alike.
 */
import type { CancellationToken, Disposable } from 'vscode-jsonrpc';
import {
  ErrorCodes,
  isCancelledRunData,
  isPiMessage,
  Methods,
  newRunId,
  type CancelledRunData,
  type ErrorInfo,
  type PiMessage,
  type RunParams,
  type RunResult,
  type ShutdownReceipt,
  type Usage,
} from './protocol';

/**
 * What Session needs of a connection; LanguageClient and MessageConnection both provide it. Both
 * keep one handler per notification method, so a Session owns pi/message on its connection.
 */
export interface RpcConnection {
  sendRequest<R>(method: string, param: unknown, token?: CancellationToken): Promise<R>;
  onNotification(method: string, handler: (params: unknown) => void): Disposable;
}

export type RunStatus = 'running' | 'completed' | 'failed' | 'cancelled' | 'error';
export type ToolStatus = 'running' | 'completed' | 'failed' | 'cancelled';

export interface TextItem {
  kind: 'text';
  attempt: number;
  text: string;
}

export interface ThoughtItem {
  kind: 'thought';
  attempt: number;
  text: string;
  live: boolean;
}

export interface ToolItem {
  kind: 'tool';
  attempt: number;
  toolCallId: string;
  name: string;
  arguments: Record<string, unknown>;
  status: ToolStatus;
  output: string;
  error?: string;
  truncated?: boolean;
  fullOutputPath?: string;
}

export interface NoticeItem {
  kind: 'notice';
  attempt: number;
  level: 'info' | 'warning' | 'error';
  text: string;
}

export type RunItem = TextItem | ThoughtItem | ToolItem | NoticeItem;

/** Everything known about one run, in the order it happened; the view renders it. */
export interface RunRecord {
  runId: string;
  title: string;
  prompt: string;
  status: RunStatus;
  attempt: number;
  items: RunItem[];
  /** Assistant text of the current attempt: the concatenation of its deltas. */
  text: string;
  startedAt: number;
  endedAt?: number;
  lastSeq: number;
  /** Notifications whose seq did not follow the previous one (the contract says: never). */
  seqGaps: number;
  sessionId?: string;
  cwd?: string;
  stopReason?: string;
  usage?: Usage;
  error?: ErrorInfo;
  /** A JSON-RPC level error (invalid params, bridge gone), as opposed to a failed run. */
  rpcError?: { code: number; message: string };
  shutdown?: ShutdownReceipt;
}

export function newRunRecord(runId: string, prompt: string, title?: string): RunRecord {
  return {
    runId,
    title: title ?? prompt,
    prompt,
    status: 'running',
    attempt: 1,
    items: [],
    text: '',
    startedAt: Date.now(),
    lastSeq: 0,
    seqGaps: 0,
  };
}

function findTool(record: RunRecord, toolCallId: string): ToolItem | undefined {
  for (let i = record.items.length - 1; i >= 0; i--) {
    const item = record.items[i];
    if (item?.kind === 'tool' && item.toolCallId === toolCallId) {
      return item;
    }
  }
  return undefined;
}

/** Fold one pi/message into the record (pure apart from mutating `record`). */
export function applyMessage(record: RunRecord, msg: PiMessage): void {
  if (msg.seq !== record.lastSeq + 1) {
    record.seqGaps += 1;
  }
  record.lastSeq = Math.max(record.lastSeq, msg.seq);
  if (msg.attempt !== record.attempt) {
    record.attempt = msg.attempt;
    record.text = '';
  }
  const attempt = msg.attempt;
  const last = record.items[record.items.length - 1];
  switch (msg.type) {
    case 'session.started':
    case 'session.resumed':
      record.sessionId = msg.content.sessionId;
      record.cwd = msg.content.cwd;
      break;
    case 'assistant':
      record.text += msg.content.text;
      if (last?.kind === 'text' && last.attempt === attempt) {
        last.text += msg.content.text;
      } else {
        record.items.push({ kind: 'text', attempt, text: msg.content.text });
      }
      break;
    case 'assistant.thought': {
      const live = msg.content.live === true;
      if (live && last?.kind === 'thought' && last.live && last.attempt === attempt) {
        last.text += msg.content.text;
      } else if (!live && last?.kind === 'text' && last.attempt === attempt) {
        // A buffered thought comes at the end of its turn; show it before the turn's text.
        record.items.splice(record.items.length - 1, 0, { kind: 'thought', attempt, text: msg.content.text, live });
      } else {
        record.items.push({ kind: 'thought', attempt, text: msg.content.text, live });
      }
      break;
    }
    case 'tool.call':
      record.items.push({
        kind: 'tool',
        attempt,
        toolCallId: msg.content.toolCallId,
        name: msg.content.name,
        arguments: msg.content.arguments,
        status: 'running',
        output: '',
      });
      break;
    case 'tool.update': {
      const tool = findTool(record, msg.content.toolCallId);
      if (tool) {
        tool.output = msg.content.output;
      }
      break;
    }
    case 'tool.completed': {
      const tool = findTool(record, msg.content.toolCallId);
      if (tool) {
        tool.status = msg.content.cancelled === true ? 'cancelled' : 'completed';
        tool.output = msg.content.output;
        tool.truncated = msg.content.truncated ?? undefined;
        tool.fullOutputPath = msg.content.fullOutputPath ?? undefined;
      }
      break;
    }
    case 'tool.failed': {
      const tool = findTool(record, msg.content.toolCallId);
      if (tool) {
        tool.status = msg.content.cancelled === true ? 'cancelled' : 'failed';
        tool.error = msg.content.error;
      }
      break;
    }
    case 'terminal.completed':
      record.text = msg.content.text;
      record.stopReason = msg.content.stopReason;
      record.usage = msg.content.usage ?? undefined;
      break;
    case 'terminal.failed':
      record.error = msg.content.error;
      record.items.push({
        kind: 'notice',
        attempt,
        level: 'error',
        text: `${msg.content.error.kind}: ${msg.content.error.message}`,
      });
      break;
    case 'terminal.cancelled':
      record.shutdown = msg.content.shutdown;
      break;
    case 'run.retrying':
      record.items.push({
        kind: 'notice',
        attempt,
        level: 'warning',
        text: `retrying (attempt ${msg.content.attempt}) in ${Math.round(msg.content.delayMs)} ms: ${msg.content.reason}`,
      });
      break;
    case 'run.steered':
      record.items.push({ kind: 'notice', attempt, level: 'info', text: `steered: ${msg.content.text}` });
      break;
    case 'run.queued':
      record.items.push({
        kind: 'notice',
        attempt,
        level: 'info',
        text: `waiting for a free run slot (position ${msg.content.position}, limit ${msg.content.limit})`,
      });
      break;
    default: {
      const unknown: never = msg;
      void unknown;
    }
  }
}

/** Fold the pi/run answer into the record: the answer is authoritative for the final state. */
export function applyResult(record: RunRecord, result: RunResult): void {
  record.status = result.status;
  record.text = result.text;
  record.stopReason = result.stopReason ?? record.stopReason;
  record.sessionId = result.sessionId ?? record.sessionId;
  record.usage = result.usage ?? record.usage;
  record.error = result.error ?? record.error;
  record.endedAt = Date.now();
}

/** Fold the `data` of a -32800 answer into the record; its partial text stays. */
export function applyCancelled(record: RunRecord, data: CancelledRunData): void {
  record.status = 'cancelled';
  if (data.text.length > 0 || record.text.length === 0) {
    record.text = data.text;
  }
  record.shutdown = data.shutdown ?? record.shutdown;
  record.sessionId = data.sessionId ?? record.sessionId;
  for (const item of record.items) {
    if (item.kind === 'tool' && item.status === 'running') {
      item.status = 'cancelled';
    }
  }
  record.endedAt = Date.now();
}

export function applyRpcError(record: RunRecord, code: number, message: string): void {
  record.status = 'error';
  record.rpcError = { code, message };
  record.endedAt = Date.now();
}

function errorParts(err: unknown): { code: number; message: string; data: unknown } {
  if (typeof err === 'object' && err !== null) {
    const e = err as { code?: unknown; message?: unknown; data?: unknown };
    return {
      code: typeof e.code === 'number' ? e.code : 0,
      message: typeof e.message === 'string' ? e.message : JSON.stringify(err),
      data: e.data,
    };
  }
  return { code: 0, message: String(err), data: undefined };
}

export interface RunOptions {
  token?: CancellationToken;
  title?: string;
  /** Called after every change of the record (each notification, and the final state). */
  onUpdate?: (record: RunRecord) => void;
  /** Called with each pi/message of the run as it arrives, after it is folded into the record. */
  onMessage?: (msg: PiMessage) => void;
}

/** Runs pi through one bridge connection and keeps the records of its live runs. */
export class Session implements Disposable {
  private readonly live = new Map<
    string,
    { record: RunRecord; onUpdate?: (r: RunRecord) => void; onMessage?: (msg: PiMessage) => void }
  >();
  private readonly subscription: Disposable;

  constructor(
    private readonly connection: RpcConnection,
    private readonly log: (message: string) => void = () => undefined,
  ) {
    this.subscription = connection.onNotification(Methods.message, (params) => this.onMessage(params));
  }

  /** The records of the runs that have not answered yet, oldest first. */
  liveRuns(): RunRecord[] {
    return [...this.live.values()].map((entry) => entry.record);
  }

  /**
   * Start a run and settle when the bridge answers. Never rejects for a failed or cancelled run:
   * the returned record says how it ended (a JSON-RPC error ends it with status "error").
   */
  async run(params: RunParams, options: RunOptions = {}): Promise<RunRecord> {
    const runId = params.runId ?? newRunId();
    const record = newRunRecord(runId, params.prompt, options.title);
    const entry = { record, onUpdate: options.onUpdate, onMessage: options.onMessage };
    this.live.set(runId, entry);
    entry.onUpdate?.(record);
    try {
      // An explicit `undefined` token would be sent as a second positional param: pass none.
      const request = { ...params, runId };
      const result = await (options.token
        ? this.connection.sendRequest<RunResult>(Methods.run, request, options.token)
        : this.connection.sendRequest<RunResult>(Methods.run, request));
      applyResult(record, result);
    } catch (err) {
      const { code, message, data } = errorParts(err);
      if (code === ErrorCodes.requestCancelled && isCancelledRunData(data)) {
        applyCancelled(record, data);
      } else if (code === ErrorCodes.requestCancelled) {
        applyCancelled(record, { runId, status: 'cancelled', text: record.text, shutdown: null });
      } else {
        applyRpcError(record, code, message);
      }
    } finally {
      this.live.delete(runId);
    }
    if (record.seqGaps > 0) {
      this.log(`run ${runId}: ${record.seqGaps} pi/message notification(s) out of sequence`);
    }
    entry.onUpdate?.(record);
    return record;
  }

  private onMessage(params: unknown): void {
    if (!isPiMessage(params)) {
      this.log(`ignored a malformed ${Methods.message} notification`);
      return;
    }
    const entry = this.live.get(params.runId);
    if (!entry) {
      this.log(`ignored ${params.type} of unknown run ${params.runId}`);
      return;
    }
    applyMessage(entry.record, params);
    entry.onMessage?.(params);
    entry.onUpdate?.(entry.record);
  }

  /** Any other request of the contract (pi/cancel, pi/steer, pi/sessions, pi/session) on this connection. */
  request<R>(method: string, params: unknown): Promise<R> {
    return this.connection.sendRequest<R>(method, params);
  }

  dispose(): void {
    this.subscription.dispose();
  }
}
