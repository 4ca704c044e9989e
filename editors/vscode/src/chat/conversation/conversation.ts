/**
 * One conversation with pi, without the `vscode` module: its turns (live ones from pi/run's
 * pi/message stream, earlier ones from pi/session), sending (a new turn, or while a run goes a
 * steer or a queued message), a one-shot prompt as its first turn (ask), stopping, context chips for the next prompt, the diffs of its edits
 * and the latest context usage. Everything the chat view shows is posted as typed host→view
 * messages (chatProtocol.ts); `replay()` posts the whole state again for a fresh webview.
 */
import type { CancellationToken } from 'vscode-jsonrpc';
import { answerFor, approvalKey, approvalView, commonEnds, decisionOf, outcomeText, splitLines } from '../approvals';
import {
  envelope,
  type ApprovalView,
  type CommandView,
  type EditStat,
  type HostMessage,
  type HostToView,
  type InputState,
  type TurnStatus,
} from '../chatProtocol';
import type { TurnPlace } from '../rewind/checkpointPlan';
import { chipLabel, contextPrompt, promptTitle, type ContextChip, type ContextData } from '../prompts';
import {
  Methods,
  newRunId,
  type CancelResult,
  type CommandsResult,
  type ContractEntry,
  type ContextUsage,
  type FileDiff,
  type Mode,
  type PromptImage,
  type PiMessage,
  type ProposedDiff,
  type RequestPermissionAnswer,
  type RequestPermissionParams,
  type SetModeResult,
  type RunParams,
  type SessionHistory,
  type SessionNotFound,
  type SteerResult,
} from '../../bridge/protocol';
import { footerLine, statusLine, type RunRecord } from '../../bridge/run';
import type { Session } from '../../bridge/session';

/** What a conversation needs from its surroundings (the extension, or a test). */
export interface ConversationHost {
  /** The session on a running bridge (starting it if needed). */
  session(): Promise<Session>;
  /** pi/run params for `prompt` from the current settings (model, thinking, cwd). */
  runParams(prompt: string, runId: string): RunParams;
  /** Deliver a message to the chat view. */
  post(message: HostMessage): void;
  /** Its context usage or cost changed, or a turn started or ended (the status bar shows them). */
  onChange?(): void;
  /** An approval of this conversation started or stopped waiting (the view's badge counts them). */
  onApprovals?(): void;
  /** The mode the bridge gives a conversation nobody picked one for (this client answers: ask). */
  defaultMode?(): Mode;
  /** The bridge's default agent (initialize's `defaultAgent`; null before the bridge answered). */
  defaultAgent?(): string | null;
  /** The workspace folder a new conversation runs in (pi/commands of one without a session). */
  cwd?(): string | undefined;
  /** Its title changed (the view's title bar shows it). */
  onTitle?(): void;
  log?(message: string): void;
  /**
   * What the chat remembers of each conversation beyond pi's session file (its mode, its turns'
   * footers and approval cards), so that reopening it shows them again; the extension keeps it in
   * its workspace state. Without it a reopened conversation shows pi's history alone.
   */
  memory?: ConversationMemory;
}

/** One turn's part of a remembered conversation, matched to pi's history by place and prompt. */
export interface RememberedTurn {
  prompt: string;
  status: TurnStatus;
  summary: string | null;
  receipt: string | null;
  approvals: ApprovalView[];
}

/** What the chat keeps of a conversation, by its session id. */
export interface RememberedConversation {
  mode: Mode | null;
  /** The agent picked for it (the header's agent picker). */
  agent?: string | null;
  /** Its title as the chat showed it (pi's history has only a title set with a rename). */
  title?: string | null;
  turns: RememberedTurn[];
}

/** Where remembered conversations are kept (the extension's workspace state, or a test's map). */
export interface ConversationMemory {
  get(sessionId: string): RememberedConversation | undefined;
  set(sessionId: string, conversation: RememberedConversation): void;
}

/** A tool call of this conversation waiting for the user's decision. */
interface PendingApproval {
  params: RequestPermissionParams;
  view: ApprovalView;
  settle(answer: RequestPermissionAnswer): void;
}

/** How a one-shot turn is run: a token that cancels it, and each change of its run's record. */
export interface TurnOptions {
  token?: CancellationToken;
  onUpdate?: (record: RunRecord) => void;
}

export interface ConversationUsage {
  contextUsage: ContextUsage | null;
  sessionCost: number | null;
}

interface TurnRecord {
  turnId: string;
  prompt: string;
  chips: string[];
  live: boolean;
  entries: HostToView['entry'][];
  /** Its approval cards, in the order they were asked (kept for a replay). */
  approvals: ApprovalView[];
  status: TurnStatus;
  summary: string | null;
  /** The bridge's full account of how the run ended (the footer's details). */
  receipt?: string | null;
}

/** A file one run changed: its text before the run's first edit and after its last. */
export interface RunChange {
  path: string;
  oldText: string | null | undefined;
  newText: string | null | undefined;
}

/** Added and removed lines between two texts: the lines between their common head and tail. */
export function editStat(oldText: string | null | undefined, newText: string | null | undefined): EditStat {
  const before = splitLines(oldText);
  const after = splitLines(newText);
  const { head, tail } = commonEnds(before, after);
  return { added: after.length - head - tail, removed: before.length - head - tail };
}

/** "just now", "5 min ago", "3 h ago", "2 days ago" for an ISO time, as of `now` (ms). */
export function relativeTime(iso: string, now: number): string {
  const seconds = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(seconds) || seconds < 60) {
    return 'just now';
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min ago`;
  }
  if (seconds < 86_400) {
    return `${Math.floor(seconds / 3600)} h ago`;
  }
  const days = Math.floor(seconds / 86_400);
  return days === 1 ? 'yesterday' : `${days} days ago`;
}

/** The status bar's context figure: `ctx 12.3% · $0.0042` (empty before the first answer). */
export function usageLabel(usage: ConversationUsage): string {
  const parts: string[] = [];
  const percent = usage.contextUsage?.percent;
  if (typeof percent === 'number') {
    parts.push(`ctx ${percent.toFixed(1)}%`);
  }
  if (typeof usage.sessionCost === 'number') {
    parts.push(`$${usage.sessionCost.toFixed(4)}`);
  }
  return parts.join(' · ');
}

/** The message as the view gets it: a diff keeps its path and line, its texts stay in the host. */
function forView(entry: ContractEntry): ContractEntry {
  if (entry.type === 'tool.completed' && entry.content.diff) {
    const { path, line } = entry.content.diff;
    return { type: entry.type, content: { ...entry.content, diff: { path, line: line ?? null } } };
  }
  return entry;
}

/** Images one prompt takes at most (the contract's bound). */
const MAX_IMAGES = 8;

/** Chip ids are unique in the window, so chips can move between conversations. */
let chipCounter = 0;

export class Conversation {
  sessionId: string | null = null;
  title: string | null = null;
  queueMode = false;
  private omittedTurns = 0;
  private readonly turns: TurnRecord[] = [];
  private readonly diffs = new Map<string, FileDiff>();
  private current: { runId: string; turn: TurnRecord } | undefined;
  private readonly queue: string[] = [];
  private chips: ContextChip[] = [];
  /** Images pasted into the input, waiting for the next prompt. */
  private images: PromptImage[] = [];
  private usage: ConversationUsage = { contextUsage: null, sessionCost: null };
  private readonly pending = new Map<string, PendingApproval>();
  /** Proposed diffs of this conversation's approval cards, by card key (for Open Diff). */
  private readonly proposed = new Map<string, ProposedDiff>();

  /** The permission mode the user picked for it (null: the bridge's default for this client). */
  private chosenMode: Mode | null = null;
  /**
   * The agent it runs, as picked or as its session says (null: the bridge's default). Every run
   * names it, so a conversation stays with its agent whichever way it was picked.
   */
  agent: string | null = null;
  /** Its `/` commands, and for which session (or `cwd:` without one) they were fetched. */
  private commands: CommandView[] = [];
  private commandsFor: string | null = null;

  constructor(private readonly host: ConversationHost) {}

  /**
   * Its permission mode. Once picked, every run passes it (so it holds across a bridge restart),
   * and a change while it has a pi session is also sent with pi/setMode.
   */
  get mode(): Mode {
    return this.chosenMode ?? this.host.defaultMode?.() ?? 'ask';
  }

  /**
   * Whether it runs the bridge's default agent. pi/commands and pi/models take no agent: without
   * a session they open the default agent (whose session a run of another agent could not
   * continue), and they find the default agent's conversations only. So another agent's
   * conversation asks neither.
   */
  get onDefaultAgent(): boolean {
    return this.agent === null || this.agent === (this.host.defaultAgent?.() ?? null);
  }

  /**
   * Run `name` from the next prompt on. Only a conversation with no turn can change its agent (the
   * bridge refuses a run naming another agent than its session's): false otherwise, and the caller
   * starts a new conversation. A session opened ahead of the first prompt is dropped, as it is
   * the old agent's.
   */
  setAgent(name: string | null): boolean {
    if (this.turns.length > 0 || this.current) {
      return false;
    }
    if (name === this.agent) {
      return true;
    }
    this.agent = name;
    // The old agent's commands go, and an answer still on its way for them is not taken.
    this.commands = [];
    this.commandsFor = null;
    this.sessionId = null;
    this.replay();
    return true;
  }

  /** How many of its tool calls wait for the user. */
  get pendingApprovals(): number {
    return this.pending.size;
  }

  get running(): boolean {
    return this.current !== undefined;
  }

  get runId(): string | undefined {
    return this.current?.runId;
  }

  /** No turn yet (a fresh conversation). */
  get isEmpty(): boolean {
    return this.turns.length === 0;
  }

  get lastUsage(): ConversationUsage {
    return this.usage;
  }

  private post<K extends keyof HostToView>(type: K, payload: HostToView[K]): void {
    this.host.post(envelope<HostToView, K>(type, payload) as HostMessage);
  }

  private inputState(): InputState {
    return {
      running: this.running,
      queueMode: this.queueMode,
      queued: [...this.queue],
      mode: this.mode,
      chips: this.chips.map((chip) => ({
        id: chip.id,
        label: chipLabel(chip),
        tooltip: chip.kind === 'selection' ? `lines ${chip.startLine}-${chip.endLine} of ${chip.path}` : chip.path,
      })),
    };
  }

  private postInput(): void {
    this.post('input', this.inputState());
  }

  /** Post the whole conversation again (a webview that was just created or reloaded). */
  replay(): void {
    this.post('reset', { sessionId: this.sessionId, title: this.title, omittedTurns: this.omittedTurns });
    for (const turn of this.turns) {
      this.post('turn', { turnId: turn.turnId, prompt: turn.prompt, chips: turn.chips, live: turn.live });
      for (const entry of turn.entries) {
        this.post('entry', entry);
      }
      for (const approval of turn.approvals) {
        this.post('approval', { ...approval });
      }
      if (turn.status !== 'running') {
        this.post('turnEnded', { turnId: turn.turnId, status: turn.status, summary: turn.summary, receipt: turn.receipt ?? null });
      }
    }
    if (this.sessionId) {
      this.post('session', { sessionId: this.sessionId });
    }
    this.postInput();
    this.post('commands', { commands: this.commands });
    void this.loadCommands();
  }

  /**
   * Fetch its `/` commands (pi/commands of its session, or of the workspace before it has one)
   * unless they are held already, and send them to the view. A bridge that cannot list them
   * leaves the list empty: `/` then completes nothing, and a typed command is still sent.
   */
  async loadCommands(): Promise<void> {
    if (!this.onDefaultAgent) {
      return;
    }
    const key = this.sessionId ?? `cwd:${this.host.cwd?.() ?? ''}`;
    if (this.commandsFor === key) {
      return;
    }
    this.commandsFor = key;
    try {
      const session = await this.host.session();
      const cwd = this.host.cwd?.();
      const params = this.sessionId ? { sessionId: this.sessionId } : cwd ? { cwd } : {};
      const answer = await session.request<CommandsResult>(Methods.commands, params);
      if (this.commandsFor !== key) {
        return; // the conversation got a session meanwhile: that list is on its way
      }
      // Asked without a session, the bridge opened the conversation's pi: its first prompt goes
      // there (unless a prompt was sent meanwhile, which started a session of its own).
      if (answer.sessionId && this.sessionId === null && this.turns.length === 0) {
        this.commandsFor = answer.sessionId;
        this.adoptSession(answer.sessionId);
      }
      this.commands = answer.commands.map((c) => ({
        name: c.name,
        description: c.description ?? '',
        source: c.source,
        argumentHint: c.argumentHint ?? null,
      }));
      this.post('commands', { commands: this.commands });
    } catch (err) {
      this.commandsFor = null; // ask again next time
      this.host.log?.(`pi/commands: ${String(err)}`);
    }
  }

  /** Its title from now on (a rename, `/name`, `session.renamed`). */
  setTitle(title: string): void {
    this.title = title;
    this.post('title', { title });
    this.host.onTitle?.();
  }

  addChip(chip: ContextData): void {
    chipCounter += 1;
    this.chips.push({ ...chip, id: `chip-${chipCounter}` });
    this.postInput();
  }

  /** Hand the chips waiting for the next prompt to `other` (a one-shot prompt takes them along). */
  moveChips(other: Conversation): void {
    other.chips.push(...this.chips);
    this.chips = [];
    this.postInput();
    other.postInput();
  }

  removeChip(id: string): void {
    this.chips = this.chips.filter((chip) => chip.id !== id);
    this.postInput();
  }

  removeQueued(index: number): void {
    this.queue.splice(index, 1);
    this.postInput();
  }

  setQueueMode(queueMode: boolean): void {
    this.queueMode = queueMode;
    this.postInput();
  }

  /**
   * Send `text`: a new turn when idle; while a run goes, a steer (pi/steer), or with `queue` (or
   * queue mode on) a message that is sent as the next turn once the run ends.
   */
  async send(text: string, queue = false, images: PromptImage[] = []): Promise<void> {
    const message = text.trim();
    if (!message) {
      return;
    }
    // Images go with the next prompt, as chips do (a steer carries text only).
    this.images.push(...images);
    if (!this.current) {
      await this.sendQueued(await this.runTurn(message));
      return;
    }
    if (queue || this.queueMode) {
      this.queue.push(message);
      this.postInput();
      return;
    }
    await this.steer(message);
  }

  private async steer(message: string): Promise<void> {
    const current = this.current;
    if (!current) {
      return;
    }
    let reason = 'the bridge did not answer';
    try {
      const session = await this.host.session();
      const answer = await session.request<SteerResult>(Methods.steer, { runId: current.runId, message });
      if (answer.accepted) {
        this.post('announce', { text: 'steering message sent' });
        return;
      }
      reason = answer.reason ?? 'not accepted';
    } catch (err) {
      reason = err instanceof Error ? err.message : String(err);
    }
    // A run that can no longer take a steer (it is ending) gets the message as its next turn.
    this.queue.push(message);
    this.post('announce', { text: `queued: the run could not be steered (${reason})` });
    this.postInput();
  }

  /**
   * The conversation's permission mode from now on: sent with pi/setMode when it has a pi session
   * (in force from its next tool call, a running run's included), else with its first run.
   */
  async setMode(mode: Mode): Promise<void> {
    this.chosenMode = mode;
    this.remember();
    this.postInput();
    this.host.onChange?.();
    if (!this.sessionId) {
      return;
    }
    try {
      const session = await this.host.session();
      await session.request<SetModeResult>(Methods.setMode, { sessionId: this.sessionId, mode });
      this.post('announce', { text: `mode: ${mode}` });
    } catch (err) {
      this.host.log?.(`pi/setMode ${mode}: ${String(err)}`);
      this.post('announce', { text: `the mode could not be set: ${err instanceof Error ? err.message : String(err)}` });
    }
  }

  /**
   * A tool call of this conversation's running turn asks the user (pi/requestPermission): its card
   * shows in the turn until a button answers it, or `token` (the bridge's $/cancelRequest)
   * withdraws it, or the turn ends.
   */
  requestPermission(params: RequestPermissionParams, token?: CancellationToken): Promise<RequestPermissionAnswer> {
    const turn = this.turns.find((t) => t.turnId === params.runId);
    const key = approvalKey(params);
    if (!turn || turn.status !== 'running' || this.pending.has(key) || token?.isCancellationRequested) {
      return Promise.resolve({ outcome: 'cancelled' });
    }
    return new Promise<RequestPermissionAnswer>((resolve) => {
      const view = approvalView(params);
      const link = token?.onCancellationRequested(() => this.settleApproval(key, { outcome: 'cancelled' }, 'cancelled'));
      this.pending.set(key, {
        params,
        view,
        settle: (answer) => {
          link?.dispose();
          resolve(answer);
        },
      });
      if (params.diff) {
        this.proposed.set(key, params.diff);
      }
      turn.approvals.push(view);
      this.post('approval', { ...view });
      this.host.onApprovals?.();
    });
  }

  /** A card's button: the option's answer goes to the bridge, and the card shows it. */
  answerApproval(key: string, optionId: string, message: string | null): void {
    const pending = this.pending.get(key);
    const option = pending?.params.options.find((o) => o.optionId === optionId);
    if (!pending || !option) {
      return; // settled already (cancelled, or a second click)
    }
    const answer = answerFor(option, message);
    this.settleApproval(key, answer, outcomeText(option, answer), decisionOf(option));
  }

  private settleApproval(key: string, answer: RequestPermissionAnswer, outcome: string, decision: 'allow' | 'deny' | null = null): void {
    const pending = this.pending.get(key);
    if (!pending) {
      return;
    }
    this.pending.delete(key);
    pending.view.state = answer.outcome === 'cancelled' ? 'cancelled' : 'answered';
    pending.view.outcome = outcome;
    pending.view.decision = decision;
    pending.settle(answer);
    this.post('approval', { ...pending.view });
    this.host.onApprovals?.();
  }

  /** The proposed change of approval card `key` (its before and after texts). */
  proposedDiff(key: string): ProposedDiff | undefined {
    return this.proposed.get(key);
  }

  /** Stop the running turn (the three-stage cancel); its partial text stays. */
  async stop(): Promise<void> {
    const current = this.current;
    if (!current) {
      return;
    }
    try {
      const session = await this.host.session();
      await session.request<CancelResult>(Methods.cancel, { runId: current.runId });
    } catch (err) {
      this.host.log?.(`pi/cancel ${current.runId}: ${String(err)}`);
    }
  }

  /**
   * A one-shot prompt (pi: Ask…) as a turn of this idle conversation: settles with the run's record
   * once that turn ends (undefined if the bridge could not start), while messages queued during it
   * go on as the next turns. `token` cancels the run like Stop does.
   */
  async ask(question: string, options: TurnOptions = {}): Promise<RunRecord | undefined> {
    if (this.current) {
      throw new Error('ask() needs an idle conversation');
    }
    const ended = await this.runTurn(question, options);
    void this.sendQueued(ended);
    return ended.record;
  }

  /**
   * A Stop leaves nothing of the turn behind: its steers the bridge handed back and the messages
   * queued for after it go back into the input instead of reaching the agent later.
   */
  private giveBackUnsent(steers: readonly string[]): void {
    const texts = [...steers, ...this.queue.splice(0)];
    if (texts.length === 0) {
      return;
    }
    this.post('unsent', { texts });
    const count = texts.length === 1 ? 'a message' : `${texts.length} messages`;
    this.post('announce', { text: `stopped: ${count} not sent, back in the input` });
  }

  /** After a completed turn, send the next queued message as a turn, and so on. */
  private async sendQueued(ended: { status: TurnStatus }): Promise<void> {
    let status = ended.status;
    while (status === 'completed') {
      const next = this.queue.shift();
      if (next === undefined) {
        return;
      }
      ({ status } = await this.runTurn(next));
    }
  }

  private async runTurn(question: string, options: TurnOptions = {}): Promise<{ status: TurnStatus; record?: RunRecord }> {
    const chips = this.chips;
    this.chips = [];
    const images = this.images.slice(0, MAX_IMAGES);
    this.images = [];
    const runId = newRunId('chat');
    const turn: TurnRecord = {
      turnId: runId,
      prompt: question,
      chips: chips.map(chipLabel),
      live: true,
      entries: [],
      approvals: [],
      status: 'running',
      summary: null,
    };
    this.turns.push(turn);
    if (this.title === null) {
      this.setTitle(promptTitle(question));
    }
    this.current = { runId, turn };
    this.post('turn', { turnId: turn.turnId, prompt: turn.prompt, chips: turn.chips, live: true });
    this.postInput();
    this.host.onChange?.();
    let status: TurnStatus = 'error';
    let record: RunRecord | undefined;
    try {
      const session = await this.host.session();
      const params: RunParams = this.host.runParams(contextPrompt(question, chips), runId);
      if (this.sessionId) {
        params.sessionId = this.sessionId;
      }
      if (this.chosenMode) {
        params.mode = this.chosenMode;
      }
      if (this.agent) {
        params.agent = this.agent;
      }
      if (images.length > 0) {
        params.images = images as RunParams['images'];
      }
      record = await session.run(params, {
        title: turn.prompt,
        token: options.token,
        onUpdate: options.onUpdate,
        onMessage: (m) => this.onMessage(turn, m),
      });
      status = record.status;
      if (record.sessionId) {
        this.adoptSession(record.sessionId);
      }
      turn.summary = footerLine(record);
      turn.receipt = statusLine(record);
    } catch (err) {
      turn.summary = `error · ${err instanceof Error ? err.message : String(err)}`;
    }
    turn.status = status;
    this.current = undefined;
    if (status === 'cancelled') {
      this.giveBackUnsent(record?.unsent ?? []);
    }
    // The bridge withdraws a pending request when its run ends; a card it left is settled here.
    for (const [key, pending] of this.pending) {
      if (pending.params.runId === turn.turnId) {
        this.settleApproval(key, { outcome: 'cancelled' }, 'cancelled');
      }
    }
    this.remember();
    // The status bar shows whether a run goes, beside the usage.
    this.host.onChange?.();
    this.post('turnEnded', { turnId: turn.turnId, status, summary: turn.summary, receipt: turn.receipt ?? null });
    if (record?.error?.kind === 'auth') {
      this.post('setup', { turnId: turn.turnId, missing: setupMissing(record.error.message) });
    }
    this.post('announce', { text: status === 'completed' ? 'pi finished' : `pi ${status}` });
    this.postInput();
    return { status, record };
  }

  /** A session the bridge opened for this conversation before its first prompt (pi/models). */
  offerSession(sessionId: string): void {
    if (this.sessionId === null && this.turns.length === 0 && this.onDefaultAgent) {
      this.adoptSession(sessionId);
    }
  }

  private adoptSession(sessionId: string): void {
    if (this.sessionId !== sessionId) {
      this.sessionId = sessionId;
      this.post('session', { sessionId });
      void this.loadCommands(); // the session's own commands (its extensions, its project)
    }
  }

  private onMessage(turn: TurnRecord, msg: PiMessage): void {
    const entry = { type: msg.type, content: msg.content } as ContractEntry;
    switch (entry.type) {
      case 'session.started':
      case 'session.resumed':
        this.adoptSession(entry.content.sessionId);
        return;
      case 'tool.update':
        // Cumulative output: the view replaces the tool's output.
        break;
      case 'session.renamed':
        this.setTitle(entry.content.title);
        break;
      case 'terminal.completed':
        this.usage = {
          contextUsage: entry.content.contextUsage ?? this.usage.contextUsage,
          sessionCost: entry.content.sessionCost ?? this.usage.sessionCost,
        };
        this.host.onChange?.();
        break;
      default:
        break;
    }
    this.addEntry(turn, entry, msg.attempt);
  }

  private addEntry(turn: TurnRecord, entry: ContractEntry, attempt: number): void {
    let stat: EditStat | null = null;
    if (entry.type === 'tool.completed' && entry.content.diff) {
      const diff = entry.content.diff;
      this.diffs.set(`${turn.turnId}/${entry.content.toolCallId}`, diff);
      stat = diff.oldText === undefined && diff.newText === undefined ? null : editStat(diff.oldText, diff.newText);
    }
    const payload: HostToView['entry'] = { turnId: turn.turnId, entry: forView(entry), attempt, stat };
    if (entry.type === 'tool.update') {
      // Keep only the latest cumulative output of a tool for a replay.
      const id = entry.content.toolCallId;
      const at = turn.entries.findIndex((e) => e.entry.type === 'tool.update' && e.entry.content.toolCallId === id);
      if (at >= 0) {
        turn.entries.splice(at, 1);
      }
    }
    turn.entries.push(payload);
    this.post('entry', payload);
  }

  /** Show an earlier session: its turns from pi/session; the next prompt continues it. */
  async open(sessionId: string): Promise<boolean> {
    const session = await this.host.session();
    const history = await session.request<SessionHistory | SessionNotFound>(Methods.session, { sessionId });
    if (history.found === false || !('turns' in history)) {
      return false;
    }
    this.sessionId = history.sessionId;
    this.title = history.title;
    this.agent = history.agent ?? null;
    this.omittedTurns = history.omittedTurns ?? 0;
    this.turns.length = 0;
    this.diffs.clear();
    history.turns.forEach((past, index) => {
      const turn: TurnRecord = {
        turnId: `${history.sessionId}:${index}`,
        prompt: past.prompt,
        chips: [],
        live: false,
        entries: [],
        approvals: [],
        status: 'completed',
        summary: null,
      };
      this.turns.push(turn);
      for (const entry of past.messages) {
        turn.entries.push({ turnId: turn.turnId, entry, attempt: 1, stat: null });
      }
    });
    this.recall();
    this.replay();
    return true;
  }

  /** Keep its mode and its ended turns' footers and approval cards (a conversation with a session). */
  private remember(): void {
    if (!this.sessionId || !this.host.memory) {
      return;
    }
    const turns = this.turns.map((turn) => ({
      prompt: turn.prompt,
      status: turn.status === 'running' ? 'completed' : turn.status,
      summary: turn.summary,
      receipt: turn.receipt ?? null,
      approvals: turn.approvals.filter((a) => a.state !== 'pending').map((a) => ({ ...a })),
    }));
    this.host.memory.set(this.sessionId, { mode: this.chosenMode, agent: this.agent, title: this.title, turns });
  }

  /**
   * Put back what the chat remembered of this conversation onto the turns pi's history gave: the
   * mode, and each turn's footer and settled approval cards, where the turn at the same place has
   * the same prompt (a turn pi's history left out, or a rewound one, gets nothing).
   */
  private recall(): void {
    const saved = this.sessionId ? this.host.memory?.get(this.sessionId) : undefined;
    if (!saved) {
      return;
    }
    this.chosenMode = saved.mode ?? this.chosenMode;
    this.agent ??= saved.agent ?? null;
    this.title ??= saved.title ?? null;
    const offset = saved.turns.length - this.turns.length;
    this.turns.forEach((turn, index) => {
      // pi's history may omit the oldest turns: align the newest ones.
      const past = saved.turns[index + Math.max(0, offset)];
      if (!past || past.prompt.trim() !== turn.prompt.trim()) {
        return;
      }
      turn.status = past.status;
      turn.summary = past.summary;
      turn.receipt = past.receipt;
      turn.approvals = past.approvals.map((a) => ({ ...a, turnId: turn.turnId, key: `${turn.turnId}/${a.key.split('/').pop() ?? ''}` }));
    });
  }

  /** Where turn `turnId` is among the shown turns, to find its checkpoint (checkpoints.ts). */
  turnPlace(turnId: string): TurnPlace | undefined {
    const index = this.turns.findIndex((t) => t.turnId === turnId);
    const turn = this.turns[index];
    return turn && { index, count: this.turns.length, prompt: turn.prompt, runId: turn.live ? turn.turnId : null };
  }

  /** The full diff of an edit shown in turn `turnId`. */
  diff(turnId: string, toolCallId: string): FileDiff | undefined {
    return this.diffs.get(`${turnId}/${toolCallId}`);
  }

  /** Every file the newest turn with edits changed (that turn is "this run"). */
  runChanges(): { turnId: string; changes: RunChange[] } | undefined {
    for (let i = this.turns.length - 1; i >= 0; i--) {
      const turn = this.turns[i]!;
      const byPath = new Map<string, RunChange>();
      for (const { entry } of turn.entries) {
        if (entry.type !== 'tool.completed' || !entry.content.diff) {
          continue;
        }
        const diff = this.diffs.get(`${turn.turnId}/${entry.content.toolCallId}`);
        if (!diff) {
          continue;
        }
        const seen = byPath.get(diff.path);
        byPath.set(diff.path, { path: diff.path, oldText: seen ? seen.oldText : diff.oldText, newText: diff.newText });
      }
      if (byPath.size > 0) {
        return { turnId: turn.turnId, changes: [...byPath.values()] };
      }
    }
    return undefined;
  }
}

/** What a first-run card says is missing, from an `auth` failure's message. */
export function setupMissing(message: string): string {
  return /no api key|no model|\/login/i.test(message)
    ? 'No provider is set up: pi found no API key for a model. Set a provider and its key, or try the built-in scripted model (offline, no key).'
    : 'The provider refused the key. Set a provider and its key again, or try the built-in scripted model (offline, no key).';
}
