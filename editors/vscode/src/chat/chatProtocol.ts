/**
 * The one typed map of messages between the extension host and the chat webview (no `vscode`, no
 * DOM): each side posts `Envelope<…>` values and switches on `type`, so a renamed message or a
 * changed payload fails `tsc` on both sides. Contract messages travel as `ContractEntry`, the
 * contract's own types generated from docs/protocol.schema.json.
 */
import type { ContractEntry, Mode, PermissionOption, PromptImage } from '../bridge/protocol';
import type { MentionItem } from './mentions/mentionText';

/** A context chip: a selection or a file that goes with the next prompt. */
export interface ChipView {
  id: string;
  label: string;
  tooltip: string;
}

export type TurnStatus = 'running' | 'completed' | 'failed' | 'cancelled' | 'error';

/** What the input area shows; one table in the webview maps it to buttons. */
export interface InputState {
  running: boolean;
  /** A second send while running is queued instead of steering. */
  queueMode: boolean;
  queued: string[];
  chips: ChipView[];
  /** The conversation's permission mode (the header's picker shows it). */
  mode: Mode;
}

/** One line of an approval card's diff: kept as context, removed or added. */
export interface DiffLine {
  op: ' ' | '-' | '+';
  text: string;
}

/**
 * An approval card: a tool call that waits for the user (pi/requestPermission), and once settled
 * how. The host keeps the full texts of a proposed diff (for Open Diff); the card gets its lines.
 */
export interface ApprovalView {
  /** `runId/toolCallId`: unique per pending decision. */
  key: string;
  turnId: string;
  tool: string;
  kind: 'read' | 'edit' | 'execute' | 'other';
  title: string;
  /** The shell command, when the tool runs one. */
  command: string | null;
  diff: {
    path: string;
    lines: DiffLine[];
    /** Changed lines left out of `lines` (the card shows a bounded number). */
    hidden: number;
    added: number;
    removed: number;
    /** Both texts are known: Open Diff can show them. */
    canOpen: boolean;
    /** Why there is no diff to show (a new file, an edit that would not apply). */
    note: string | null;
  } | null;
  options: Pick<PermissionOption, 'optionId' | 'kind' | 'name'>[];
  state: 'pending' | 'answered' | 'cancelled';
  /** How it was settled ("Allowed", "Denied: reason", "cancelled: the run ended"). */
  outcome: string | null;
  /** What the user's answer did: the tool ran (`allow`) or not (`deny`); null until answered. */
  decision: 'allow' | 'deny' | null;
}

/** Line counts of one edit, computed by the host so file texts never reach the webview. */
export interface EditStat {
  added: number;
  removed: number;
}

/** One `/` command the input completes (pi/commands). */
export interface CommandView {
  /** Without the slash: `compact`, `skill:review`. */
  name: string;
  description: string;
  source: string;
  argumentHint: string | null;
}

/** A first-run card's buttons (firstRun.ts does each). */
export type SetupAction = 'key' | 'scripted' | 'doctor';

/** One model of the header's picker (pi/models); `value` is `provider/id`. */
export interface ModelView {
  value: string;
  label: string;
}

/** One agent of the header's agent picker (initialize's `agents`); a missing one is disabled. */
export interface AgentView {
  name: string;
  label: string;
  enabled: boolean;
  /** Why it cannot be picked (null when it can). */
  why: string | null;
}

export interface HostToView {
  /** Forget the thread: a new or another conversation follows. */
  reset: { sessionId: string | null; title: string | null; omittedTurns: number };
  /** A turn starts: the user's prompt. `chips` are the labels of the context sent with it. */
  turn: { turnId: string; prompt: string; chips: string[]; live: boolean };
  /**
   * One contract message of a turn (live or from history, `attempt` 1 there); diffs arrive
   * without their texts. The view folds it into the turn's run model (bridge/run.ts).
   */
  entry: { turnId: string; entry: ContractEntry; attempt: number; stat: EditStat | null };
  /**
   * A turn ended (or never started). `summary` says how: status, stop reason or error, the
   * shutdown receipt of a cancel, usage, time (null for a turn from history). `summary` is in a
   * user's words (how it ended, how long, tokens, cost); `receipt` is the bridge's full account
   * (stop reason, the shutdown's stage and processes), one click away under the footer.
   */
  turnEnded: { turnId: string; status: TurnStatus; summary: string | null; receipt?: string | null };
  input: InputState;
  /** The conversation got its pi session id (the webview keeps it in its state for a reload). */
  session: { sessionId: string };
  /** A short sentence for the aria-live region. */
  announce: { text: string };
  /** Put text into the input (e.g. a recalled prompt). */
  fill: { text: string };
  /**
   * A Stop left these messages unsent (the run's steers the agent had not taken in, the messages
   * queued behind it): they go back into the input, ahead of what it holds, to edit or send again.
   */
  unsent: { texts: string[] };
  /** An approval card appears, or changes state (settled by the user or cancelled). */
  approval: ApprovalView;
  /** The `/` commands of the shown conversation (sent again when it changes). */
  commands: { commands: CommandView[] };
  /** The conversation's title changed (a rename, `/name`). */
  title: { title: string | null };
  /** A run failed for want of a provider or key: the turn shows what is missing and the way out. */
  setup: { turnId: string; missing: string };
  /** The header's model picker: the agent's models and the one the next prompt runs. */
  models: { models: ModelView[]; current: string | null };
  /** The header's agent picker: the bridge's agents and the one the shown conversation runs. */
  agents: { agents: AgentView[]; current: string };
  /** The completions of the `@query` the input asked for (mentionQuery). */
  mentions: { query: string; items: MentionItem[] };
}

export interface ViewToHost {
  /** The webview is loaded; `sessionId` is what its saved state held (null: none). */
  ready: { sessionId: string | null };
  /** `images`: pasted or dropped into the input; they go with the next prompt (the contract's `images`). */
  send: { text: string; queue: boolean; images?: PromptImage[] };
  /** The input's `@word` changed: the host answers with `mentions`. */
  mentionQuery: { query: string };
  stop: Record<string, never>;
  setQueueMode: { queueMode: boolean };
  removeChip: { id: string };
  removeQueued: { index: number };
  openDiff: { turnId: string; toolCallId: string };
  openFile: { path: string; line: number };
  /** An approval card's button; `message` is the reason typed in the card (a reject's). */
  answerApproval: { key: string; optionId: string; message: string | null };
  openApprovalDiff: { key: string };
  /** The header's mode picker. */
  setMode: { mode: Mode };
  /** A user message's Restore checkpoint button (checkpoints.ts). */
  restoreCheckpoint: { turnId: string };
  /** A first-run card's button. */
  setup: { action: SetupAction };
  /** The header's model picker: `provider/id`, or '' for the agent's default. */
  pickModel: { value: string };
  /** The header's agent picker: the shown conversation's agent from its next prompt. */
  pickAgent: { name: string };
}

/** A message of map `M`: `{type, payload}` with the payload of that type. */
export type Envelope<M> = { [K in keyof M]: { type: K; payload: M[K] } }[keyof M];
export type HostMessage = Envelope<HostToView>;
export type ViewMessage = Envelope<ViewToHost>;

/** Build one message of `M` (keeps the payload checked against its type). */
export function envelope<M, K extends keyof M>(type: K, payload: M[K]): { type: K; payload: M[K] } {
  return { type, payload };
}

/**
 * The input after a Stop handed `texts` back: each unsent message, in the order it was sent, then
 * what the input held (a draft typed meanwhile is kept), one blank line between them.
 */
export function withUnsent(texts: readonly string[], current: string): string {
  return [...texts, current].filter((text) => text.trim().length > 0).join('\n\n');
}
