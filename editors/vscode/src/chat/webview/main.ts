/**
 * The chat webview: the one renderer of the host's messages (chatProtocol.ts), which carry the
 * contract's own message types. Each turn folds its entries into a run model (bridge/run.ts, the
 * same model the session keeps) and shows each of its items as one node: a new item appends (or
 * inserts) its node once, a changed item updates only its node (a streaming text re-renders at
 * most once per animation frame); the thread is never rebuilt per delta.
 * Its saved state holds only the conversation's sessionId, for a window reload.
 */
import {
  applyEntry,
  compactionText,
  newRunRecord,
  settleTools,
  type RunItem,
  type PlanItem,
  type RunRecord,
  type ToolItem,
} from '../../bridge/run';
import type {
  ApprovalView,
  CommandView,
  EditStat,
  HostMessage,
  HostToView,
  InputState,
  ViewMessage,
  ViewToHost,
} from '../chatProtocol';
import { withUnsent } from '../chatProtocol';
import { MODE_DESCRIPTIONS, MODES, type Mode } from '../../bridge/protocol';
import { renderMarkdown } from '../markdown';
import { restoreButton } from './restore';
import { linkified, setupCard, showAgents, showModels } from './setup';
import { approvalIcon, footerNode, shownToolTexts, TOOL_STATE_WAITING } from './cards';
import { imageTray } from './images';
import { mentionPopup } from './mentionPopup';

interface VsCodeApi {
  postMessage(message: ViewMessage): void;
  getState(): { sessionId?: string | null } | undefined;
  setState(state: { sessionId: string | null }): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();

function send<K extends keyof ViewToHost>(type: K, payload: ViewToHost[K]): void {
  vscode.postMessage({ type, payload } as ViewMessage);
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

const thread = document.getElementById('thread')!;
const empty = document.getElementById('empty')!;
const live = document.getElementById('live')!;
const input = document.getElementById('prompt') as HTMLTextAreaElement;
const chipsRow = document.getElementById('chips')!;
const queuedList = document.getElementById('queued')!;
const sendButton = document.getElementById('send') as HTMLButtonElement;
const queueToggle = document.getElementById('queue-toggle') as HTMLButtonElement;
const modeSelect = document.getElementById('mode') as HTMLSelectElement;
const titleNode = document.getElementById('title')!;
const commandList = document.getElementById('commands') as HTMLUListElement;
for (const mode of MODES) {
  const option = el('option', undefined, mode);
  option.value = mode;
  option.title = MODE_DESCRIPTIONS[mode];
  modeSelect.append(option);
}
modeSelect.addEventListener('change', () => send('setMode', { mode: modeSelect.value as Mode }));
// Made before the input's own keys are bound: the @ popup takes its keys first.
const mentionsUi = mentionPopup(input, (query) => send('mentionQuery', { query }));
const tray = imageTray(input, (text) => {
  live.textContent = text;
});

// ------------------------------------------------------------------ turns

interface TurnView {
  section: HTMLElement;
  answer: HTMLElement;
  /** The turn's run model; `nodes[i]` shows `record.items[i]`. */
  record: RunRecord;
  nodes: HTMLElement[];
  /** Line counts of each edit, by toolCallId (the host computes them). */
  stats: Map<string, EditStat | null>;
  /** The turn's approval cards, under its answer, by request key. */
  approvals: HTMLElement;
  cards: Map<string, HTMLElement>;
  /** Tool calls whose approval card waits for the user (their tool card says so). */
  waiting: Set<string>;
  status: HTMLElement;
}

const turns = new Map<string, TurnView>();
/** Markdown blocks changed since the last frame, with the item whose text they show. */
const dirty = new Map<HTMLElement, { text: string }>();
let frame = 0;

function paintSoon(node: HTMLElement, item: { text: string }): void {
  dirty.set(node, item);
  frame ||= requestAnimationFrame(paintNow);
}

/** Render every block changed since the last frame (a turn that ends shows its whole text). */
function paintNow(): void {
  if (frame) {
    cancelAnimationFrame(frame);
    frame = 0;
  }
  for (const [node, item] of dirty) {
    node.innerHTML = renderMarkdown(item.text);
  }
  dirty.clear();
  follow();
}

let following = true;
window.addEventListener('scroll', () => {
  const doc = document.scrollingElement ?? document.documentElement;
  following = doc.scrollHeight - doc.scrollTop - doc.clientHeight < 40;
});
function follow(): void {
  if (following) {
    window.scrollTo(0, document.body.scrollHeight);
  }
}

function addTurn(p: HostToView['turn']): void {
  const section = el('section', 'turn');
  section.dataset.turnId = p.turnId;
  section.dataset.status = p.live ? 'running' : 'completed';
  const prompt = el('div', 'prompt');
  prompt.append(el('span', 'who', 'You'), restoreButton(() => send('restoreCheckpoint', { turnId: p.turnId })));
  prompt.append(el('div', 'prompt-text', p.prompt));
  if (p.chips.length > 0) {
    const chips = el('div', 'chips');
    for (const label of p.chips) {
      chips.append(el('span', 'chip', label));
    }
    prompt.append(chips);
  }
  const answer = el('div', 'answer');
  const status = el('div', 'turn-status', p.live ? 'pi is working…' : '');
  const approvals = el('div', 'approvals');
  section.append(prompt, answer, approvals, status);
  thread.append(section);
  const record = newRunRecord(p.turnId, p.prompt);
  turns.set(p.turnId, { section, answer, record, nodes: [], stats: new Map(), approvals, cards: new Map(), waiting: new Set(), status });
  empty.hidden = true;
  follow();
}

const TOOL_ICON: Record<ToolItem['status'], string> = { running: '⟳', completed: '✓', failed: '✗', cancelled: '■' };
const OUTPUT_LINES = 5;

function toolSummary(tool: ToolItem): string {
  const command = tool.arguments['command'];
  if (typeof command === 'string') {
    return command;
  }
  const path = tool.arguments['path'] ?? tool.arguments['file_path'];
  if (typeof path === 'string') {
    return path;
  }
  // A subagent (Claude Code's Task) says what it is for.
  const description = tool.arguments['description'];
  if (typeof description === 'string') {
    return description;
  }
  const text = JSON.stringify(tool.arguments);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text || tool.name;
}

/** The card's `<pre>` of class `cls`, made the first time there is text for it. */
function setToolText(card: HTMLElement, cls: 'tool-output' | 'tool-error', text: string | undefined): void {
  let pre = card.querySelector<HTMLPreElement>(`:scope > pre.${cls}`);
  if (pre && !text) {
    pre.remove(); // its text now shows in the other block (a failing command's output)
    return;
  }
  if (!pre) {
    if (!text) {
      return;
    }
    const made = el('pre', cls);
    made.title = 'Click to show all of it';
    made.addEventListener('click', () => made.classList.toggle('expanded'));
    // The output, then the error, right under the head (above a truncation note or an edit).
    const above = (cls === 'tool-error' && card.querySelector(':scope > pre.tool-output')) || card.querySelector(':scope > .tool-head');
    above!.after(made);
    pre = made;
  }
  pre.textContent = text ?? '';
  pre.classList.toggle('clipped', (text ?? '').split('\n').length > OUTPUT_LINES);
}

function addEdit(card: HTMLElement, turnId: string, tool: ToolItem, stat: EditStat | null): void {
  const diff = tool.diff;
  if (!diff || card.querySelector(':scope > .edit')) {
    return;
  }
  const { path, line } = diff;
  const row = el('div', 'edit');
  const link = el('a', 'edit-file', path.split('/').pop() ?? path);
  link.href = '#';
  link.title = `${path}:${line}`;
  link.setAttribute('aria-label', `Open ${path} at line ${line}`);
  link.addEventListener('click', (e) => {
    e.preventDefault();
    send('openFile', { path, line });
  });
  row.append(link);
  if (stat) {
    row.append(el('span', 'added', `+${stat.added}`), el('span', 'removed', `−${stat.removed}`));
  }
  const button = el('button', 'open-diff', 'Open Diff');
  button.setAttribute('aria-label', `Open the diff of ${path}`);
  button.addEventListener('click', () => send('openDiff', { turnId, toolCallId: tool.toolCallId }));
  row.append(button);
  card.append(row);
}

/** A new node for `item` (its content is filled by `showItem`). */
function itemNode(item: RunItem): HTMLElement {
  switch (item.kind) {
    case 'text':
      return el('div', 'assistant markdown');
    case 'thought': {
      const details = el('details', 'thought');
      details.append(el('summary', undefined, item.live ? 'Thought (live)' : 'Thought'), el('div', 'markdown'));
      return details;
    }
    case 'tool': {
      const card = el('div', 'tool');
      card.dataset.toolCallId = item.toolCallId;
      card.dataset.toolName = item.name;
      const head = el('div', 'tool-head');
      head.append(
        el('span', 'tool-icon'),
        el('span', 'tool-name', item.name),
        el('code', 'tool-command', toolSummary(item)),
        el('span', 'tool-state'),
      );
      card.append(head);
      return card;
    }
    case 'steered': {
      const steer = el('div', 'steered');
      steer.append(el('span', 'who', 'You (steer)'), el('div', 'prompt-text', item.text));
      return steer;
    }
    case 'notice': {
      const notice = el('div', `notice ${item.level}`);
      notice.append(...linkified(item.text, send));
      return notice;
    }
    case 'compaction': {
      const divider = el('div', 'compaction');
      divider.setAttribute('role', 'separator');
      return divider;
    }
  }
}

/** Bring `node` up to date with `item`. */
function showItem(turn: TurnView, node: HTMLElement, item: RunItem): void {
  switch (item.kind) {
    case 'text':
      paintSoon(node, item);
      return;
    case 'thought':
      paintSoon(node.querySelector<HTMLElement>('.markdown')!, item);
      return;
    case 'tool': {
      const waiting = item.status === 'running' && turn.waiting.has(item.toolCallId);
      node.dataset.status = item.status;
      node.dataset.waiting = String(waiting);
      node.querySelector(':scope > .tool-head > .tool-icon')!.textContent = waiting ? '?' : TOOL_ICON[item.status];
      node.querySelector(':scope > .tool-head > .tool-state')!.textContent = waiting ? TOOL_STATE_WAITING : item.status;
      const texts = shownToolTexts(item.output, item.error);
      setToolText(node, 'tool-output', texts.output);
      setToolText(node, 'tool-error', texts.error);
      if (item.truncated && !node.querySelector(':scope > .note')) {
        const note = el('div', 'note', 'output truncated');
        const fullPath = item.fullOutputPath;
        if (fullPath) {
          const link = el('a', 'full-output', fullPath);
          link.href = '#';
          link.title = 'Open the full output';
          link.addEventListener('click', (e) => {
            e.preventDefault();
            send('openFile', { path: fullPath, line: 1 });
          });
          note.append('; full output in ', link);
        }
        node.append(note);
      }
      // An approval card asked before its tool card existed moves into it.
      const loose = turn.cards.get(`${turn.record.runId}/${item.toolCallId}`);
      if (loose && loose.parentElement !== node) {
        node.append(loose);
      }
      addEdit(node, turn.record.runId, item, turn.stats.get(item.toolCallId) ?? null);
      return;
    }
    case 'compaction': {
      const text = compactionText(item);
      node.dataset.state = item.state;
      node.textContent = text;
      node.setAttribute('aria-label', text);
      if (item.state === 'compacted') {
        live.textContent = text;
      }
      return;
    }
    case 'steered':
    case 'notice':
      return;
  }
}

const planNode = document.getElementById('plan')!;
const PLAN_ICON: Record<PlanItem['status'], string> = { pending: '○', in_progress: '◐', completed: '✓' };
const PLAN_STATE: Record<PlanItem['status'], string> = { pending: 'to do', in_progress: 'in progress', completed: 'done' };

/** Pin the agent's plan above the input (an empty plan hides it): each entry with its status. */
function showPlan(entries: readonly PlanItem[]): void {
  planNode.replaceChildren();
  planNode.hidden = entries.length === 0;
  if (entries.length === 0) {
    return;
  }
  const done = entries.filter((e) => e.status === 'completed').length;
  const details = el('details', 'plan');
  details.open = true;
  details.append(el('summary', 'plan-head', `Plan · ${done}/${entries.length} done`));
  const list = el('ol', 'plan-entries');
  for (const entry of entries) {
    const row = el('li', 'plan-entry');
    row.dataset.status = entry.status;
    row.setAttribute('aria-label', `${entry.content}: ${PLAN_STATE[entry.status]}`);
    row.append(el('span', 'plan-icon', PLAN_ICON[entry.status]), el('span', 'plan-text', entry.content));
    list.append(row);
  }
  details.append(list);
  planNode.append(details);
}

/**
 * Where a new node of `item` goes: a subagent's tool call folds into its parent's card (a closed
 * "Subagent" group that counts its calls); everything else into the turn's answer.
 */
function placeNode(turn: TurnView, node: HTMLElement, item: RunItem, before: HTMLElement | null): void {
  const parentId = item.kind === 'tool' ? item.parentToolCallId : undefined;
  const parent = parentId
    ? turn.nodes.find((n) => n.classList.contains('tool') && n.dataset.toolCallId === parentId)
    : undefined;
  if (!parent) {
    turn.answer.insertBefore(node, before && before.parentElement === turn.answer ? before : null);
    return;
  }
  let group = parent.querySelector<HTMLDetailsElement>(':scope > details.subagent');
  if (!group) {
    group = el('details', 'subagent');
    group.append(el('summary', 'subagent-head'), el('div', 'subagent-calls'));
    parent.append(group);
  }
  node.classList.add('child');
  group.querySelector('.subagent-calls')!.append(node);
  const count = group.querySelectorAll('.subagent-calls > .tool').length;
  group.querySelector('summary')!.textContent = `Subagent · ${count} tool call${count === 1 ? '' : 's'}`;
}

function addEntry(p: HostToView['entry']): void {
  const turn = turns.get(p.turnId);
  if (!turn) {
    return;
  }
  if (p.entry.type === 'plan') {
    applyEntry(turn.record, p.entry, p.attempt);
    showPlan(turn.record.plan ?? []);
    return;
  }
  // The approval card shows a question and the user's answer; a note says only what a rule or the
  // mode decided without asking.
  if (p.entry.type === 'permission.requested' || (p.entry.type === 'permission.resolved' && p.entry.content.by === 'user')) {
    return;
  }
  if (p.entry.type === 'tool.completed') {
    turn.stats.set(p.entry.content.toolCallId, p.stat);
  }
  const change = applyEntry(turn.record, p.entry, p.attempt);
  if (change) {
    const item = turn.record.items[change.index]!;
    if (change.inserted) {
      const node = itemNode(item);
      placeNode(turn, node, item, turn.nodes[change.index] ?? null);
      turn.nodes.splice(change.index, 0, node);
    }
    showItem(turn, turn.nodes[change.index]!, item);
  }
  follow();
}

function endTurn(p: HostToView['turnEnded']): void {
  const turn = turns.get(p.turnId);
  if (!turn) {
    return;
  }
  // A run that ended leaves no tool running (a stop or a crash may have cut them off).
  for (const index of settleTools(turn.record)) {
    showItem(turn, turn.nodes[index]!, turn.record.items[index]!);
  }
  paintNow(); // the last deltas may still wait for a frame: the ended turn shows all of them
  turn.section.dataset.status = p.status;
  turn.status.replaceChildren(...footerNode(p.summary, p.receipt ?? null));
}

// ------------------------------------------------------------------ approvals

const KIND_VERB: Record<ApprovalView['kind'], string> = { read: 'read', edit: 'edit', execute: 'run', other: 'use' };

/** The card's answer for the first option of `kind`, with the reason typed in the card. */
function answerWith(card: HTMLElement, view: ApprovalView, kind: 'allow_once' | 'reject_once'): void {
  const option = view.options.find((o) => o.kind === kind);
  if (!option || card.dataset.state !== 'pending') {
    return;
  }
  const reason = card.querySelector<HTMLInputElement>('.approval-reason')?.value.trim() ?? '';
  send('answerApproval', { key: view.key, optionId: option.optionId, message: reason || null });
}

/** A new approval card: what the tool would do, Open Diff, a reason, one real button per option. */
function approvalCard(view: ApprovalView): HTMLElement {
  const card = el('section', 'approval');
  card.dataset.key = view.key;
  card.tabIndex = -1;
  card.setAttribute('role', 'group');
  const heading = view.diff
    ? `pi wants to ${view.tool} ${view.diff.path}`
    : view.command !== null
      ? `pi wants to run ${view.tool}`
      : `pi wants to ${KIND_VERB[view.kind]} ${view.tool}`;
  card.setAttribute('aria-label', `${heading}. Enter allows, Escape denies.`);
  const head = el('div', 'approval-head');
  head.append(el('span', 'approval-icon', '?'), el('span', 'approval-tool', heading));
  card.append(head);
  if (view.command !== null) {
    card.append(el('pre', 'approval-command', view.command));
  } else if (!view.diff) {
    card.append(el('code', 'approval-title', view.title));
  }
  const diff = view.diff;
  if (diff) {
    const row = el('div', 'approval-file');
    row.append(el('code', 'approval-path', diff.path));
    if (diff.canOpen) {
      row.append(el('span', 'added', `+${diff.added}`), el('span', 'removed', `−${diff.removed}`));
      const open = el('button', 'open-diff', 'Open Diff');
      open.setAttribute('aria-label', `Open the proposed change of ${diff.path} as a diff`);
      open.addEventListener('click', () => send('openApprovalDiff', { key: view.key }));
      row.append(open);
    }
    card.append(row);
    if (diff.lines.length > 0) {
      const pre = el('pre', 'approval-diff');
      pre.setAttribute('aria-label', `Proposed change: ${diff.added} line(s) added, ${diff.removed} removed`);
      for (const line of diff.lines) {
        const cls = line.op === '+' ? 'line-added' : line.op === '-' ? 'line-removed' : 'line-context';
        pre.append(el('span', cls, `${line.op} ${line.text}\n`));
      }
      card.append(pre);
    }
    if (diff.hidden > 0) {
      card.append(el('div', 'note', `${diff.hidden} more changed line(s): Open Diff shows them all`));
    }
    if (diff.note) {
      card.append(el('div', 'note', diff.note));
    }
  }
  const reason = el('input', 'approval-reason');
  reason.type = 'text';
  reason.placeholder = 'Reason for Deny (optional; pi is told)';
  reason.maxLength = 4096; // the contract's bound of a reject's message
  reason.setAttribute('aria-label', 'Reason for Deny, told to pi (optional). Enter denies with it.');
  card.append(reason);
  const buttons = el('div', 'approval-buttons');
  for (const option of view.options) {
    const button = el('button', `approval-option ${option.kind}`, option.name);
    button.dataset.optionId = option.optionId;
    button.dataset.kind = option.kind;
    button.addEventListener('click', () => {
      const message = option.kind.startsWith('reject') ? reason.value.trim() : '';
      send('answerApproval', { key: view.key, optionId: option.optionId, message: message || null });
    });
    buttons.append(button);
  }
  card.append(buttons, el('div', 'approval-outcome'));
  card.addEventListener('keydown', (event) => {
    if (event.isComposing || event.keyCode === 229) {
      return;
    }
    if (event.key === 'Escape') {
      event.preventDefault();
      answerWith(card, view, 'reject_once');
    } else if (event.key === 'Enter' && event.target === reason) {
      event.preventDefault();
      answerWith(card, view, 'reject_once'); // a typed reason is a reason to deny
    } else if (event.key === 'Enter' && event.target === card) {
      event.preventDefault();
      answerWith(card, view, 'allow_once');
    }
  });
  return card;
}

function showApproval(view: ApprovalView): void {
  const turn = turns.get(view.turnId);
  if (!turn) {
    return;
  }
  let card = turn.cards.get(view.key);
  const isNew = !card;
  const toolCallId = view.key.slice(view.turnId.length + 1);
  const index = turn.record.items.findIndex((i) => i.kind === 'tool' && i.toolCallId === toolCallId);
  if (!card) {
    card = approvalCard(view);
    turn.cards.set(view.key, card);
    // Asked and answered where the tool is (in its card), not below the turn's final answer.
    (turn.nodes[index] ?? turn.answer).append(card);
  }
  card.dataset.state = view.state;
  card.dataset.decision = view.decision ?? '';
  const settled = view.state !== 'pending';
  for (const control of card.querySelectorAll<HTMLButtonElement | HTMLInputElement>('.approval-option, .approval-reason')) {
    control.disabled = settled;
  }
  card.querySelector('.approval-icon')!.textContent = approvalIcon(view);
  card.querySelector('.approval-outcome')!.textContent = view.outcome ?? '';
  if (settled) {
    turn.waiting.delete(toolCallId);
  } else {
    turn.waiting.add(toolCallId);
  }
  const item = turn.record.items[index];
  if (item) {
    showItem(turn, turn.nodes[index]!, item);
  }
  if (isNew && !settled) {
    live.textContent = `pi asks to ${KIND_VERB[view.kind]} ${view.tool}: ${view.title}`;
    // Someone typing a message keeps the focus (a card must never take their Enter).
    if (!(document.activeElement === input && input.value !== '')) {
      card.focus();
    }
    card.scrollIntoView({ block: 'nearest' });
  } else if (settled && card.contains(document.activeElement)) {
    input.focus();
  }
  follow();
}

// ------------------------------------------------------------------ input

/** One table from the turn's state to the buttons (so the state and the UI cannot drift). */
const BUTTONS: Record<'idle' | 'running', { label: string; aria: string; action: 'send' | 'stop'; placeholder: string }> = {
  idle: { label: 'Send', aria: 'Send (Enter)', action: 'send', placeholder: 'Ask pi… (Enter sends, Shift+Enter: new line)' },
  running: {
    label: '■ Stop',
    aria: 'Stop the run',
    action: 'stop',
    placeholder: 'Steer the run… (Enter steers, Alt+Enter queues instead)',
  },
};

let state: InputState = { running: false, queueMode: false, queued: [], chips: [], mode: 'ask' };
const history: string[] = [];

function renderInput(next: InputState): void {
  state = next;
  const config = BUTTONS[state.running ? 'running' : 'idle'];
  sendButton.textContent = config.label;
  sendButton.setAttribute('aria-label', config.aria);
  sendButton.dataset.action = config.action;
  input.placeholder = state.running && state.queueMode ? 'Queue a message… (sent when the run ends)' : config.placeholder;
  queueToggle.setAttribute('aria-pressed', String(state.queueMode));
  modeSelect.value = state.mode;
  queueToggle.classList.toggle('on', state.queueMode);
  chipsRow.replaceChildren(
    ...state.chips.map((chip) => {
      const node = el('span', 'chip', chip.label);
      node.title = chip.tooltip;
      const remove = el('button', 'chip-remove', '✕');
      remove.setAttribute('aria-label', `Remove ${chip.label} from the context`);
      remove.addEventListener('click', () => send('removeChip', { id: chip.id }));
      node.append(remove);
      return node;
    }),
  );
  queuedList.replaceChildren(
    ...state.queued.map((text, index) => {
      const item = el('li', 'queued-item', text);
      const remove = el('button', 'queued-remove', '✕');
      remove.setAttribute('aria-label', `Remove queued message ${index + 1}`);
      remove.addEventListener('click', () => send('removeQueued', { index }));
      item.append(remove);
      return item;
    }),
  );
}

// ------------------------------------------------------------------ / commands

/** The shown conversation's commands (the host sends them), the ones the popup lists, its pick. */
let commands: CommandView[] = [];
let matches: CommandView[] = [];
let selected = 0;
/** The input's value when Escape closed the popup: it stays closed until the text changes. */
let dismissed: string | null = null;

/** The command word being typed: `/x` at the start of the input, the caret at its end (or null). */
function commandQuery(): string | null {
  const caret = input.selectionStart ?? input.value.length;
  const after = input.value.slice(caret);
  const typed = /^\s*\/(\S*)$/.exec(input.value.slice(0, caret));
  return typed && !/^\S/.test(after) ? typed[1]!.toLowerCase() : null;
}

function popupOpen(): boolean {
  return !commandList.hidden;
}

function closePopup(): void {
  commandList.hidden = true;
  input.setAttribute('aria-expanded', 'false');
  input.removeAttribute('aria-activedescendant');
}

/** Show the commands that match what is typed: names that start with it, then names holding it. */
function updatePopup(): void {
  const query = commandQuery();
  if (query === null || commands.length === 0 || dismissed === input.value) {
    closePopup();
    return;
  }
  const starts = commands.filter((c) => c.name.toLowerCase().startsWith(query));
  const holds = commands.filter((c) => !c.name.toLowerCase().startsWith(query) && c.name.toLowerCase().includes(query));
  matches = [...starts, ...holds];
  if (matches.length === 0) {
    closePopup();
    return;
  }
  selected = Math.min(selected, matches.length - 1);
  commandList.replaceChildren(
    ...matches.map((c, index) => {
      const row = el('li');
      row.id = `command-${index}`;
      row.setAttribute('role', 'option');
      row.setAttribute('aria-selected', String(index === selected));
      row.dataset.name = c.name;
      row.append(el('span', 'cmd-name', `/${c.name}`));
      if (c.argumentHint) {
        row.append(el('span', 'cmd-hint', c.argumentHint));
      }
      row.append(el('span', 'cmd-desc', c.description), el('span', 'cmd-source', c.source));
      row.title = c.description;
      // A click picks it and leaves the focus in the input.
      row.addEventListener('mousedown', (event) => {
        event.preventDefault();
        selected = index;
        acceptCommand();
      });
      return row;
    }),
  );
  commandList.hidden = false;
  input.setAttribute('aria-expanded', 'true');
  input.setAttribute('aria-activedescendant', `command-${selected}`);
  commandList.children[selected]?.scrollIntoView({ block: 'nearest' });
}

/** Put the picked command into the input as `/name `, the caret after it, ready for its arguments. */
function acceptCommand(): void {
  const command = matches[selected];
  if (!command) {
    return;
  }
  const caret = input.selectionStart ?? input.value.length;
  const rest = input.value.slice(caret).replace(/^\s+/, '');
  const head = `/${command.name} `;
  input.value = head + rest;
  input.setSelectionRange(head.length, head.length);
  closePopup();
  input.focus();
}

/** The popup's keys; true when the key was its own (the input does nothing more with it). */
function popupKey(event: KeyboardEvent): boolean {
  if (!popupOpen()) {
    return false;
  }
  if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
    selected = (selected + (event.key === 'ArrowDown' ? 1 : matches.length - 1)) % matches.length;
    updatePopup();
    return true;
  }
  if (event.key === 'Escape') {
    dismissed = input.value;
    closePopup();
    return true;
  }
  if (event.key === 'Tab' || (event.key === 'Enter' && !event.shiftKey && !event.altKey)) {
    const command = matches[selected];
    // `/new` typed in full and taking no arguments: Enter sends it.
    if (event.key === 'Enter' && command && !command.argumentHint && commandQuery() === command.name.toLowerCase()) {
      closePopup();
      return false;
    }
    acceptCommand();
    return true;
  }
  return false;
}

input.addEventListener('input', () => {
  if (dismissed !== input.value) {
    dismissed = null;
  }
  selected = 0;
  updatePopup();
});
input.addEventListener('blur', () => closePopup());

function submit(queue: boolean): void {
  const text = input.value;
  if (!text.trim()) {
    return;
  }
  history.push(text);
  input.value = '';
  closePopup();
  send('send', { text, queue, images: tray.take() });
}

input.addEventListener('keydown', (event) => {
  // An IME composition's Enter picks a candidate; it never sends.
  if (event.isComposing || event.keyCode === 229) {
    return;
  }
  if (popupKey(event)) {
    event.preventDefault();
    return;
  }
  if (event.key === 'Tab' && event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey) {
    // Shift+Tab cycles the permission mode, as in Claude Code.
    event.preventDefault();
    const next = MODES[(MODES.indexOf(modeSelect.value as Mode) + 1) % MODES.length]!;
    modeSelect.value = next;
    live.textContent = `mode: ${next}`;
    send('setMode', { mode: next });
  } else if (event.key === 'Escape' && state.running) {
    event.preventDefault();
    send('stop', {});
  } else if (event.key === 'Enter' && !event.shiftKey && !event.ctrlKey && !event.metaKey) {
    event.preventDefault();
    submit(event.altKey);
  } else if (event.key === 'ArrowUp' && input.value === '' && history.length > 0) {
    event.preventDefault();
    input.value = history[history.length - 1] ?? '';
  }
});
sendButton.addEventListener('click', () => {
  if (sendButton.dataset.action === 'stop') {
    send('stop', {});
  } else {
    submit(false);
  }
});
queueToggle.addEventListener('click', () => send('setQueueMode', { queueMode: !state.queueMode }));

// ------------------------------------------------------------------ messages from the host

function reset(p: HostToView['reset']): void {
  thread.replaceChildren();
  turns.clear();
  showPlan([]);
  empty.hidden = false;
  if (p.omittedTurns > 0) {
    thread.append(el('div', 'notice', `${p.omittedTurns} earlier turn(s) not shown`));
  }
  showTitle(p.title);
  vscode.setState({ sessionId: p.sessionId });
}

function showTitle(title: string | null): void {
  titleNode.textContent = title ?? '';
  titleNode.title = title ?? '';
}

window.addEventListener('message', (event: MessageEvent<HostMessage>) => {
  const msg = event.data;
  switch (msg.type) {
    case 'reset':
      reset(msg.payload);
      break;
    case 'turn':
      addTurn(msg.payload);
      break;
    case 'entry':
      addEntry(msg.payload);
      break;
    case 'turnEnded':
      endTurn(msg.payload);
      break;
    case 'input':
      renderInput(msg.payload);
      break;
    case 'session':
      vscode.setState({ sessionId: msg.payload.sessionId });
      break;
    case 'announce':
      live.textContent = msg.payload.text;
      break;
    case 'fill':
      input.value = msg.payload.text;
      input.focus();
      break;
    case 'unsent':
      input.value = withUnsent(msg.payload.texts, input.value);
      input.focus();
      break;
    case 'approval':
      showApproval(msg.payload);
      break;
    case 'commands':
      commands = msg.payload.commands;
      updatePopup();
      break;
    case 'title':
      showTitle(msg.payload.title);
      break;
    case 'setup':
      turns.get(msg.payload.turnId)?.section.append(setupCard(msg.payload, send));
      follow();
      break;
    case 'models':
      showModels(document.getElementById('model') as HTMLSelectElement, msg.payload, send);
      break;
    case 'agents':
      showAgents(document.getElementById('agent') as HTMLSelectElement, msg.payload, send);
      break;
    case 'mentions':
      mentionsUi.show(msg.payload.query, msg.payload.items);
      break;
    default: {
      const unknown: never = msg;
      void unknown;
    }
  }
});

renderInput(state);
send('ready', { sessionId: vscode.getState()?.sessionId ?? null });
