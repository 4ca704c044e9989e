/**
 * One run as the client knows it: a RunRecord, its items in the order they happened, and the fold
 * of the contract's messages into them. The one model of a run's items: the session folds live
 * pi/message notifications into it, and the chat's webview folds the same entries (live or from
 * pi/session) into it to render them. No `vscode`, no DOM.
 */
import type {
  CancelledRunData,
  ContractEntry,
  ErrorInfo,
  PiMessage,
  RunResult,
  ShutdownReceipt,
  Usage,
} from './protocol';

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
  /** The file an edit or write changed, and its first changed line (the texts stay with the host). */
  diff?: { path: string; line: number };
  /** The subagent's tool call (Claude Code's Task) that made this one: it shows folded under it. */
  parentToolCallId?: string;
}

/** One entry of the agent's plan (the contract's `plan`), as the chat pins it above the input. */
export interface PlanItem {
  content: string;
  status: 'pending' | 'in_progress' | 'completed';
}

/** A message the user sent while the run went, once pi took it in (`run.steered`). */
export interface SteeredItem {
  kind: 'steered';
  attempt: number;
  text: string;
}

export interface NoticeItem {
  kind: 'notice';
  attempt: number;
  level: 'info' | 'warning' | 'error';
  text: string;
}

/**
 * pi compacts the conversation's context (`session.compacting`), then says how far
 * (`session.compacted`): one item, a divider in the thread, that the second message completes.
 */
export interface CompactionItem {
  kind: 'compaction';
  attempt: number;
  state: 'compacting' | 'compacted';
  /** What started it: `/compact` (manual), the context filling up (threshold), an overflow. */
  reason: string;
  tokensBefore?: number;
  tokensAfter?: number;
  /** A compaction that failed or was aborted says why. */
  error?: string;
}

export type RunItem = TextItem | ThoughtItem | ToolItem | SteeredItem | NoticeItem | CompactionItem;

/** A token count as the thread shows it: 950, 1.5k, 48k. */
export function formatTokens(n: number): string {
  if (n < 1000) {
    return String(Math.round(n));
  }
  if (n < 10_000) {
    return `${(n / 1000).toFixed(1).replace(/\.0$/, '')}k`;
  }
  return `${Math.round(n / 1000)}k`;
}

/** The divider's words: "Compacting context…", "Context compacted: 48k → 9k tokens". */
export function compactionText(item: CompactionItem): string {
  if (item.state === 'compacting') {
    return item.reason === 'manual' ? 'Compacting context…' : `Compacting context (${item.reason})…`;
  }
  const { tokensBefore, tokensAfter } = item;
  if (item.error) {
    return `Context not compacted: ${item.error}`;
  }
  if (typeof tokensBefore === 'number' && typeof tokensAfter === 'number') {
    return `Context compacted: ${formatTokens(tokensBefore)} → ${formatTokens(tokensAfter)} tokens`;
  }
  if (typeof tokensBefore === 'number') {
    return `Context compacted: ${formatTokens(tokensBefore)} tokens before`;
  }
  return 'Context compacted';
}

/** Everything known about one run, in the order it happened. */
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
  /** The agent's plan as it last sent it (`plan`: each message is the whole plan). */
  plan?: PlanItem[];
  /** A JSON-RPC level error (invalid params, bridge gone), as opposed to a failed run. */
  rpcError?: { code: number; message: string };
  shutdown?: ShutdownReceipt;
  /** What the user sent into a cancelled run that never reached the model (its steers, the runs queued behind it). */
  unsent?: string[];
}

/** Which item an entry touched: the one at `index`, new there (`inserted`) or changed in place. */
export interface ItemChange {
  index: number;
  inserted: boolean;
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

function findTool(record: RunRecord, toolCallId: string): number {
  for (let i = record.items.length - 1; i >= 0; i--) {
    const item = record.items[i];
    if (item?.kind === 'tool' && item.toolCallId === toolCallId) {
      return i;
    }
  }
  return -1;
}

function push(record: RunRecord, item: RunItem): ItemChange {
  record.items.push(item);
  return { index: record.items.length - 1, inserted: true };
}

/** Update the tool `toolCallId` with `update`; an entry for an unknown tool changes nothing. */
function updateTool(record: RunRecord, toolCallId: string, update: (tool: ToolItem) => void): ItemChange | undefined {
  const index = findTool(record, toolCallId);
  const tool = record.items[index];
  if (tool?.kind !== 'tool') {
    return undefined;
  }
  update(tool);
  return { index, inserted: false };
}

/**
 * Fold one contract message of attempt `attempt` into the record (pure apart from mutating
 * `record`); says which item it touched, or undefined when it only changed the run's state.
 */
export function applyEntry(record: RunRecord, entry: ContractEntry, attempt = 1): ItemChange | undefined {
  if (attempt !== record.attempt) {
    record.attempt = attempt;
    record.text = '';
  }
  const lastIndex = record.items.length - 1;
  const last = record.items[lastIndex];
  switch (entry.type) {
    case 'session.started':
    case 'session.resumed':
      record.sessionId = entry.content.sessionId;
      record.cwd = entry.content.cwd;
      return undefined;
    case 'assistant':
      record.text += entry.content.text;
      if (last?.kind === 'text' && last.attempt === attempt) {
        last.text += entry.content.text;
        return { index: lastIndex, inserted: false };
      }
      return push(record, { kind: 'text', attempt, text: entry.content.text });
    case 'assistant.thought': {
      const live = entry.content.live === true;
      if (live && last?.kind === 'thought' && last.live && last.attempt === attempt) {
        last.text += entry.content.text;
        return { index: lastIndex, inserted: false };
      }
      const thought: ThoughtItem = { kind: 'thought', attempt, text: entry.content.text, live };
      if (!live && last?.kind === 'text' && last.attempt === attempt) {
        // A buffered thought comes at the end of its turn; show it before the turn's text.
        record.items.splice(lastIndex, 0, thought);
        return { index: lastIndex, inserted: true };
      }
      return push(record, thought);
    }
    case 'tool.call': {
      const tool: ToolItem = {
        kind: 'tool',
        attempt,
        toolCallId: entry.content.toolCallId,
        name: entry.content.name,
        arguments: entry.content.arguments,
        status: 'running',
        output: '',
      };
      const parent = entry.content.parentToolCallId;
      if (typeof parent === 'string') {
        tool.parentToolCallId = parent;
      }
      return push(record, tool);
    }
    case 'plan':
      // The whole plan each time: the chat pins it above the input, not in the thread.
      record.plan = entry.content.entries.map(({ content, status }) => ({ content, status }));
      return undefined;
    case 'tool.update':
      // Cumulative output: it replaces what was shown.
      return updateTool(record, entry.content.toolCallId, (tool) => {
        tool.output = entry.content.output;
      });
    case 'tool.completed':
      return updateTool(record, entry.content.toolCallId, (tool) => {
        tool.status = entry.content.cancelled === true ? 'cancelled' : 'completed';
        tool.output = entry.content.output;
        tool.truncated = entry.content.truncated ?? undefined;
        tool.fullOutputPath = entry.content.fullOutputPath ?? undefined;
        const diff = entry.content.diff;
        tool.diff = diff ? { path: diff.path, line: diff.line ?? 1 } : undefined;
      });
    case 'tool.failed':
      return updateTool(record, entry.content.toolCallId, (tool) => {
        tool.status = entry.content.cancelled === true ? 'cancelled' : 'failed';
        tool.error = entry.content.error;
      });
    case 'terminal.completed':
      record.text = entry.content.text;
      record.stopReason = entry.content.stopReason;
      record.usage = entry.content.usage ?? undefined;
      return undefined;
    case 'terminal.failed':
      record.error = entry.content.error;
      return push(record, {
        kind: 'notice',
        attempt,
        level: 'error',
        text: `${entry.content.error.kind}: ${entry.content.error.message}`,
      });
    case 'terminal.cancelled':
      record.shutdown = entry.content.shutdown;
      return undefined;
    case 'run.retrying':
      return push(record, {
        kind: 'notice',
        attempt,
        level: 'warning',
        text: `retrying (attempt ${entry.content.attempt}) in ${Math.round(entry.content.delayMs)} ms: ${entry.content.reason}`,
      });
    case 'run.steered':
      return push(record, { kind: 'steered', attempt, text: entry.content.text });
    case 'run.queued':
      return push(record, {
        kind: 'notice',
        attempt,
        level: 'info',
        text: `waiting for a free run slot (position ${entry.content.position}, limit ${entry.content.limit})`,
      });
    case 'notice':
      return push(record, { kind: 'notice', attempt, level: entry.content.level, text: entry.content.text });
    case 'permission.requested':
      return push(record, {
        kind: 'notice',
        attempt,
        level: 'warning',
        text: `pi asks to run ${entry.content.tool}: ${entry.content.title}`,
      });
    case 'session.compacting':
      return push(record, { kind: 'compaction', attempt, state: 'compacting', reason: entry.content.reason });
    case 'session.compacted': {
      const done = {
        tokensBefore: entry.content.tokensBefore ?? undefined,
        tokensAfter: entry.content.tokensAfter ?? undefined,
        error: entry.content.error ?? undefined,
      };
      for (let i = record.items.length - 1; i >= 0; i--) {
        const item = record.items[i];
        if (item?.kind === 'compaction' && item.state === 'compacting') {
          Object.assign(item, { state: 'compacted', ...done });
          return { index: i, inserted: false };
        }
      }
      return push(record, { kind: 'compaction', attempt, state: 'compacted', reason: 'manual', ...done });
    }
    case 'session.renamed':
      // The conversation's title, not an item of the run (the chat's header shows it).
      return undefined;
    case 'permission.resolved': {
      const { decision, by } = entry.content;
      const verb = decision === 'allow' ? 'allowed' : decision === 'reject' ? 'denied' : 'not answered';
      return push(record, { kind: 'notice', attempt, level: decision === 'allow' ? 'info' : 'warning', text: `${verb} (by ${by})` });
    }
    default: {
      const unknown: never = entry;
      void unknown;
      return undefined;
    }
  }
}

/** Fold one pi/message into the record: its seq is checked, then its entry applied. */
export function applyMessage(record: RunRecord, msg: PiMessage): ItemChange | undefined {
  if (msg.seq !== record.lastSeq + 1) {
    record.seqGaps += 1;
  }
  record.lastSeq = Math.max(record.lastSeq, msg.seq);
  return applyEntry(record, { type: msg.type, content: msg.content } as ContractEntry, msg.attempt);
}

/** A run that ended leaves no tool running: each still running is cancelled; says which. */
export function settleTools(record: RunRecord): number[] {
  const changed: number[] = [];
  record.items.forEach((item, index) => {
    if (item.kind === 'tool' && item.status === 'running') {
      item.status = 'cancelled';
      changed.push(index);
    }
  });
  return changed;
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
  if (data.unsent && data.unsent.length > 0) {
    record.unsent = [...data.unsent];
  }
  settleTools(record);
  record.endedAt = Date.now();
}

export function applyRpcError(record: RunRecord, code: number, message: string): void {
  record.status = 'error';
  record.rpcError = { code, message };
  record.endedAt = Date.now();
}

export function formatUsage(usage: Usage): string {
  const parts = [`${usage.input ?? 0} in`, `${usage.output ?? 0} out`];
  if (usage.cacheRead) {
    parts.push(`${usage.cacheRead} cache read`);
  }
  if (usage.cacheWrite) {
    parts.push(`${usage.cacheWrite} cache write`);
  }
  parts.push(`${usage.totalTokens ?? 0} tokens`);
  if (typeof usage.cost === 'number' && usage.cost > 0) {
    parts.push(`$${usage.cost.toFixed(4)}`);
  }
  return parts.join(' · ');
}

/** How a run ended, in a user's words (the chat's footer leads with it). */
const ENDED: Record<string, string> = {
  running: 'Working',
  completed: 'Done',
  cancelled: 'Stopped',
  failed: 'Failed',
  error: 'Error',
};

/** A duration as a person reads it: "0.4 s", "12 s", "2 min 5 s". */
export function formatDuration(ms: number): string {
  const seconds = ms / 1000;
  if (seconds < 10) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 60) {
    return `${Math.round(seconds)} s`;
  }
  const whole = Math.round(seconds);
  return `${Math.floor(whole / 60)} min ${whole % 60} s`;
}

/**
 * A turn's footer in the chat, in a user's words: how it ended (Done, Stopped, Failed and why),
 * how long it took, its tokens and cost. The bridge's own account (stop reason, the shutdown's
 * stage and processes) stays in `statusLine`, the receipt the footer opens.
 */
export function footerLine(record: RunRecord): string {
  const parts: string[] = [ENDED[record.status] ?? record.status];
  if (record.status === 'failed' && record.error) {
    // The notice above the footer carries the message; the footer names only its kind.
    parts[0] = `Failed (${record.error.kind})`;
  }
  if (record.rpcError) {
    parts.push(record.rpcError.message);
  }
  if (record.attempt > 1) {
    parts.push(`after ${record.attempt} attempts`);
  }
  if (record.shutdown?.survivors.length) {
    // The one thing of a stop's receipt a user must know: something it started may still run.
    parts.push(`${record.shutdown.survivors.length} process(es) still running`);
  }
  parts.push(formatDuration((record.endedAt ?? Date.now()) - record.startedAt));
  if (record.usage) {
    parts.push(`${(record.usage.totalTokens ?? 0).toLocaleString('en-US')} tokens`);
    if (typeof record.usage.cost === 'number' && record.usage.cost > 0) {
      parts.push(`$${record.usage.cost.toFixed(4)}`);
    }
  }
  return parts.join(' · ');
}

/** One line that says how the run stands: a turn's receipt in the chat, the progress notification. */
export function statusLine(record: RunRecord): string {
  const seconds = (((record.endedAt ?? Date.now()) - record.startedAt) / 1000).toFixed(1);
  const parts: string[] = [record.status];
  if (record.attempt > 1) {
    parts.push(`attempt ${record.attempt}`);
  }
  if (record.status === 'running') {
    const tool = [...record.items].reverse().find((i): i is ToolItem => i.kind === 'tool');
    if (tool?.status === 'running') {
      parts.push(`running ${tool.name}`);
    }
  }
  if (record.stopReason && record.status === 'completed') {
    parts.push(`stop: ${record.stopReason}`);
  }
  if (record.error && record.status === 'failed') {
    parts.push(`${record.error.kind}: ${record.error.message}`);
  }
  if (record.rpcError) {
    parts.push(`error ${record.rpcError.code}: ${record.rpcError.message}`);
  }
  if (record.shutdown) {
    const { stage, elapsedMs, pids, survivors } = record.shutdown;
    const ended = `${pids.length} process${pids.length === 1 ? '' : 'es'} ended (${pids.join(', ')})`;
    const left = survivors.length ? `, SURVIVORS ${survivors.join(', ')}` : '';
    // The rpc engine aborts the turn and keeps the conversation's pi for its next prompt.
    const kept = record.shutdown.agentKept ? ' · pi kept for the conversation' : '';
    parts.push(`stopped (${stage}) in ${Math.round(elapsedMs)} ms · ${pids.length ? ended : 'nothing was running'}${left}${kept}`);
  }
  if (record.usage) {
    parts.push(formatUsage(record.usage));
  }
  parts.push(`${seconds} s`);
  return parts.join(' · ');
}
