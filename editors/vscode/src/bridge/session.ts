/**
 * Runs on a bridge connection, without the `vscode` module: sends pi/run, folds the run's pi/message
 * notifications into a RunRecord (run.ts), and turns the answer (or the -32800 of a cancelled run)
 * into the record's final state. Works on a LanguageClient and on a bare vscode-jsonrpc
 * MessageConnection alike.
 */
import type { CancellationToken, Disposable } from 'vscode-jsonrpc';
import {
  ErrorCodes,
  isCancelledRunData,
  isPiMessage,
  Methods,
  newRunId,
  type PiMessage,
  type RunParams,
  type RunResult,
} from './protocol';
import { applyCancelled, applyMessage, applyResult, applyRpcError, newRunRecord, type RunRecord } from './run';

/**
 * What Session needs of a connection; LanguageClient and MessageConnection both provide it. Both
 * keep one handler per notification method, so a Session owns pi/message on its connection.
 */
export interface RpcConnection {
  sendRequest<R>(method: string, param: unknown, token?: CancellationToken): Promise<R>;
  onNotification(method: string, handler: (params: unknown) => void): Disposable;
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
