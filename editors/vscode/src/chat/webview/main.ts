/**
 * The chat webview: a thin renderer of the host's messages (chatProtocol.ts), which carry the
 * contract's own message types. The DOM only grows: a turn, a block or a tool card is appended
 * once and later messages update that one node (the streaming answer re-renders only its own
 * text block, at most once per animation frame); the thread is never rebuilt per delta.
 * Its saved state holds only the conversation's sessionId, for a window reload.
 */
import MarkdownIt from 'markdown-it';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import typescript from 'highlight.js/lib/languages/typescript';
import type { EditStat, HostMessage, HostToView, InputState, ViewMessage, ViewToHost } from '../chatProtocol';
import type { ContractEntry } from '../../bridge/protocol';

interface VsCodeApi {
  postMessage(message: ViewMessage): void;
  getState(): { sessionId?: string | null } | undefined;
  setState(state: { sessionId: string | null }): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
for (const [name, lang] of Object.entries({ bash, javascript, json, python, typescript })) {
  hljs.registerLanguage(name, lang);
}
hljs.registerAliases(['sh', 'shell'], { languageName: 'bash' });
hljs.registerAliases(['js'], { languageName: 'javascript' });
hljs.registerAliases(['ts'], { languageName: 'typescript' });
hljs.registerAliases(['py'], { languageName: 'python' });

const md: MarkdownIt = new MarkdownIt({
  html: false,
  linkify: true,
  highlight: (code: string, lang: string): string => {
    if (lang && hljs.getLanguage(lang)) {
      return `<pre class="hljs"><code>${hljs.highlight(code, { language: lang, ignoreIllegals: true }).value}</code></pre>`;
    }
    return '';
  },
});

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

// ------------------------------------------------------------------ turns

interface TurnView {
  section: HTMLElement;
  answer: HTMLElement;
  /** The text block the next `assistant` delta goes into (a tool call or thought closes it). */
  text: { node: HTMLElement; source: string } | undefined;
  tools: Map<string, HTMLElement>;
  status: HTMLElement;
}

const turns = new Map<string, TurnView>();
const dirty = new Set<{ node: HTMLElement; source: string }>();
let frame = 0;

function paintSoon(block: { node: HTMLElement; source: string }): void {
  dirty.add(block);
  frame ||= requestAnimationFrame(paintNow);
}

/** Render every block changed since the last frame (a turn that ends shows its whole text). */
function paintNow(): void {
  if (frame) {
    cancelAnimationFrame(frame);
    frame = 0;
  }
  for (const b of dirty) {
    b.node.innerHTML = md.render(b.source);
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
  prompt.append(el('span', 'who', 'You'), el('div', 'prompt-text', p.prompt));
  if (p.chips.length > 0) {
    const chips = el('div', 'chips');
    for (const label of p.chips) {
      chips.append(el('span', 'chip', label));
    }
    prompt.append(chips);
  }
  const answer = el('div', 'answer');
  const status = el('div', 'turn-status', p.live ? 'pi is working…' : '');
  section.append(prompt, answer, status);
  thread.append(section);
  turns.set(p.turnId, { section, answer, text: undefined, tools: new Map(), status });
  empty.hidden = true;
  follow();
}

const TOOL_ICON: Record<string, string> = { running: '⟳', completed: '✓', failed: '✗', cancelled: '■' };
const OUTPUT_LINES = 5;

function toolSummary(name: string, args: Record<string, unknown>): string {
  const command = args['command'];
  if (typeof command === 'string') {
    return command;
  }
  const path = args['path'];
  if (typeof path === 'string') {
    return path;
  }
  const text = JSON.stringify(args);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text || name;
}

function setToolStatus(card: HTMLElement, status: string): void {
  card.dataset.status = status;
  card.querySelector('.tool-icon')!.textContent = TOOL_ICON[status] ?? '•';
  card.querySelector('.tool-state')!.textContent = status;
}

function setToolOutput(card: HTMLElement, output: string, cls = 'tool-output'): void {
  let pre = card.querySelector<HTMLPreElement>(`pre.${cls}`);
  if (!pre) {
    pre = el('pre', cls);
    pre.title = 'Click to show all of it';
    pre.addEventListener('click', () => pre!.classList.toggle('expanded'));
    card.append(pre);
  }
  pre.textContent = output;
  pre.classList.toggle('clipped', output.split('\n').length > OUTPUT_LINES);
}

function addEdit(card: HTMLElement, turnId: string, toolCallId: string, path: string, line: number, stat: EditStat | null): void {
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
  const diff = el('button', 'open-diff', 'Open Diff');
  diff.setAttribute('aria-label', `Open the diff of ${path}`);
  diff.addEventListener('click', () => send('openDiff', { turnId, toolCallId }));
  row.append(diff);
  card.append(row);
}

function addEntry(p: HostToView['entry']): void {
  const turn = turns.get(p.turnId);
  if (!turn) {
    return;
  }
  const entry: ContractEntry = p.entry;
  switch (entry.type) {
    case 'assistant': {
      if (!turn.text) {
        const node = el('div', 'assistant markdown');
        turn.answer.append(node);
        turn.text = { node, source: '' };
      }
      turn.text.source += entry.content.text;
      paintSoon(turn.text);
      return;
    }
    case 'assistant.thought': {
      const details = el('details', 'thought');
      const body = el('div', 'markdown');
      body.innerHTML = md.render(entry.content.text);
      details.append(el('summary', undefined, 'Thought'), body);
      // A complete thought comes at the end of its message: show it before that message's text.
      if (turn.text && !entry.content.live) {
        turn.answer.insertBefore(details, turn.text.node);
      } else {
        turn.answer.append(details);
      }
      break;
    }
    case 'tool.call': {
      const card = el('div', 'tool');
      card.dataset.toolCallId = entry.content.toolCallId;
      const head = el('div', 'tool-head');
      head.append(
        el('span', 'tool-icon'),
        el('span', 'tool-name', entry.content.name),
        el('code', 'tool-command', toolSummary(entry.content.name, entry.content.arguments)),
        el('span', 'tool-state'),
      );
      card.append(head);
      setToolStatus(card, 'running');
      turn.answer.append(card);
      turn.tools.set(entry.content.toolCallId, card);
      turn.text = undefined;
      break;
    }
    case 'tool.update': {
      const card = turn.tools.get(entry.content.toolCallId);
      if (card) {
        setToolOutput(card, entry.content.output);
      }
      break;
    }
    case 'tool.completed': {
      const card = turn.tools.get(entry.content.toolCallId);
      if (card) {
        setToolStatus(card, entry.content.cancelled ? 'cancelled' : 'completed');
        setToolOutput(card, entry.content.output);
        const diff = entry.content.diff;
        if (diff) {
          addEdit(card, p.turnId, entry.content.toolCallId, diff.path, diff.line ?? 1, p.stat);
        }
      }
      break;
    }
    case 'tool.failed': {
      const card = turn.tools.get(entry.content.toolCallId);
      if (card) {
        setToolStatus(card, entry.content.cancelled ? 'cancelled' : 'failed');
        setToolOutput(card, entry.content.error, 'tool-error');
      }
      break;
    }
    case 'run.steered': {
      const steer = el('div', 'steered');
      steer.append(el('span', 'who', 'You (steer)'), el('div', 'prompt-text', entry.content.text));
      turn.answer.append(steer);
      turn.text = undefined;
      break;
    }
    case 'run.retrying':
      turn.answer.append(el('div', 'notice', `retrying (attempt ${entry.content.attempt}): ${entry.content.reason}`));
      turn.text = undefined;
      break;
    case 'run.queued':
      turn.answer.append(el('div', 'notice', `waiting for a free run slot (position ${entry.content.position})`));
      break;
    case 'terminal.failed':
      turn.answer.append(el('div', 'notice error', `${entry.content.error.kind}: ${entry.content.error.message}`));
      break;
    case 'terminal.completed': {
      const usage = entry.content.contextUsage;
      if (usage?.percent !== null && usage?.percent !== undefined) {
        turn.status.dataset.context = `${usage.percent.toFixed(1)}%`;
      }
      break;
    }
    case 'session.started':
    case 'session.resumed':
    case 'terminal.cancelled':
      break;
    default: {
      const unknown: never = entry;
      void unknown;
    }
  }
  follow();
}

const ENDED: Record<string, string> = {
  completed: '',
  cancelled: 'stopped',
  failed: 'failed',
  error: 'error',
  running: 'pi is working…',
};

function endTurn(p: HostToView['turnEnded']): void {
  const turn = turns.get(p.turnId);
  if (!turn) {
    return;
  }
  paintNow(); // the last deltas may still wait for a frame: the ended turn shows all of them
  turn.section.dataset.status = p.status;
  turn.status.textContent = [ENDED[p.status] ?? p.status, p.note ?? ''].filter(Boolean).join(': ');
  for (const card of turn.tools.values()) {
    if (card.dataset.status === 'running') {
      setToolStatus(card, 'cancelled');
    }
  }
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

let state: InputState = { running: false, queueMode: false, queued: [], chips: [] };
const history: string[] = [];

function renderInput(next: InputState): void {
  state = next;
  const config = BUTTONS[state.running ? 'running' : 'idle'];
  sendButton.textContent = config.label;
  sendButton.setAttribute('aria-label', config.aria);
  sendButton.dataset.action = config.action;
  input.placeholder = state.running && state.queueMode ? 'Queue a message… (sent when the run ends)' : config.placeholder;
  queueToggle.setAttribute('aria-pressed', String(state.queueMode));
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

function submit(queue: boolean): void {
  const text = input.value;
  if (!text.trim()) {
    return;
  }
  history.push(text);
  input.value = '';
  send('send', { text, queue });
}

input.addEventListener('keydown', (event) => {
  // An IME composition's Enter picks a candidate; it never sends.
  if (event.isComposing || event.keyCode === 229) {
    return;
  }
  if (event.key === 'Enter' && !event.shiftKey && !event.ctrlKey && !event.metaKey) {
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
  empty.hidden = false;
  if (p.omittedTurns > 0) {
    thread.append(el('div', 'notice', `${p.omittedTurns} earlier turn(s) not shown`));
  }
  vscode.setState({ sessionId: p.sessionId });
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
    default: {
      const unknown: never = msg;
      void unknown;
    }
  }
});

renderInput(state);
send('ready', { sessionId: vscode.getState()?.sessionId ?? null });
