/**
 * The chat's first-run card and the header's agent and model pickers (webview side): a run that
 * failed for want of a provider or key shows what is missing and its three ways out; the agent
 * picker lists the bridge's agents; the model picker lists the agent's own models. Kept apart from main.ts, which only routes their messages here.
 */
import type { HostToView, SetupAction, ViewToHost } from '../chatProtocol';

type Send = <K extends keyof ViewToHost>(type: K, payload: ViewToHost[K]) => void;

const ACTIONS: { action: SetupAction; label: string; title: string }[] = [
  { action: 'key', label: 'Set a provider and key…', title: "Pick a provider and paste its API key (kept in VS Code's secret storage)" },
  { action: 'scripted', label: 'Try the scripted model', title: 'A built-in offline model: no key, no network; to see how pi works here' },
  { action: 'doctor', label: 'Open the doctor', title: "Check pi's installation and providers (pi: Check Installation)" },
];

/** The card under a failed turn's answer: what is missing, and a button for each way out. */
export function setupCard(p: HostToView['setup'], send: Send): HTMLElement {
  const card = document.createElement('div');
  card.className = 'setup-card';
  card.setAttribute('role', 'group');
  card.setAttribute('aria-label', 'Set up a model provider');
  const head = document.createElement('div');
  head.className = 'setup-head';
  head.textContent = 'pi has no model to run yet';
  const missing = document.createElement('div');
  missing.className = 'setup-missing';
  missing.textContent = p.missing;
  const buttons = document.createElement('div');
  buttons.className = 'setup-buttons';
  for (const { action, label, title } of ACTIONS) {
    const button = document.createElement('button');
    button.textContent = label;
    button.title = title;
    button.dataset.action = action;
    button.addEventListener('click', () => send('setup', { action }));
    buttons.append(button);
  }
  card.append(head, missing, buttons);
  return card;
}

const PATH = /(\/[\w.@~+-]+(?:\/[\w.@~+-]+)+)/g;

/** `text` with each absolute path a link that opens the file (the docs paths of pi's errors). */
export function linkified(text: string, send: Send): Node[] {
  const nodes: Node[] = [];
  let last = 0;
  for (const match of text.matchAll(PATH)) {
    const path = match[0];
    const at = match.index ?? 0;
    if (at > last) {
      nodes.push(document.createTextNode(text.slice(last, at)));
    }
    const link = document.createElement('a');
    link.href = '#';
    link.textContent = path;
    link.title = `Open ${path}`;
    link.addEventListener('click', (e) => {
      e.preventDefault();
      send('openFile', { path, line: 1 });
    });
    nodes.push(link);
    last = at + path.length;
  }
  if (last < text.length) {
    nodes.push(document.createTextNode(text.slice(last)));
  }
  return nodes;
}

/** Fill the header's model picker; picking one sends it ('' is the agent's default). */
export function showModels(select: HTMLSelectElement, p: HostToView['models'], send: Send): void {
  if (!select.dataset.wired) {
    select.dataset.wired = '1';
    select.addEventListener('change', () => send('pickModel', { value: select.value }));
  }
  select.replaceChildren();
  const values = p.models.map((m) => m.value);
  if (p.current && !values.includes(p.current)) {
    select.append(new Option(p.current, p.current));
  }
  if (!p.current) {
    select.append(new Option('default model', ''));
  }
  for (const model of p.models) {
    select.append(new Option(model.label, model.value));
  }
  select.value = p.current ?? '';
  select.title = p.current ? `Model of the next prompt: ${p.current}` : "The agent's default model";
  select.hidden = false;
}

/**
 * The header's agent picker: the bridge's agents, the shown conversation's selected. A missing
 * agent is listed disabled, its tooltip saying why. Hidden until the bridge named its agents.
 */
export function showAgents(select: HTMLSelectElement, p: HostToView['agents'], send: Send): void {
  if (!select.dataset.wired) {
    select.dataset.wired = '1';
    select.addEventListener('change', () => send('pickAgent', { name: select.value }));
  }
  select.replaceChildren();
  for (const agent of p.agents) {
    const option = new Option(agent.label, agent.name);
    option.disabled = !agent.enabled;
    option.title = agent.why ?? `Run this conversation on ${agent.name}`;
    select.append(option);
  }
  select.value = p.current;
  select.title = `Agent of this conversation: ${p.current}`;
  select.hidden = p.agents.length === 0;
}
