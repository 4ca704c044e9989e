/**
 * `/demo` in the chat: the scripted model's scenarios, listed from the agent's own models (the
 * bridge names each scenario's model after what it does), so a new user can try edits, tools and
 * approvals without a key and without reading the bridge's source. No `vscode` here.
 */
import type { ModelInfo } from '../bridge/protocol';
import type { CommandView } from './chatProtocol';

/** The providers the scripted model runs under: the bridge's built-in one, and a test's pi config. */
const SCRIPTED_PROVIDERS = new Set(['scripted', 'fake']);

/** The `/` menu's entry. */
export const DEMO_COMMAND: CommandView = {
  name: 'demo',
  description: "Try the scripted model's scenarios (offline, no key): edits, tools, approvals",
  source: 'pi-bridge',
  argumentHint: null,
};

/** One scenario to offer: its model (`provider/id`) and what it does. */
export interface DemoScenario {
  value: string;
  id: string;
  description: string;
  /** It acts on the prompt's own text (a command, a path, JSON): the input is filled, not sent. */
  needsPrompt: boolean;
}

/** Whether the typed text is the `/demo` command. */
export function isDemo(text: string): boolean {
  return text.trim() === '/demo';
}

/** The scripted model's scenarios among the agent's models, in its order; none without it. */
export function demoScenarios(models: readonly ModelInfo[]): DemoScenario[] {
  return models
    .filter((m) => SCRIPTED_PROVIDERS.has(m.provider) && typeof m.name === 'string' && m.name !== m.id)
    .map((m) => ({
      value: `${m.provider}/${m.id}`,
      id: m.id,
      description: m.name!,
      needsPrompt: /\bthe prompt\b/.test(m.name!),
    }));
}

/** The prompt a scenario runs with when it does not act on the prompt's text. */
export function demoPrompt(scenario: DemoScenario): string {
  return `Demo of the scripted model's "${scenario.id}" scenario`;
}

/** The commands the `/` menu lists: the conversation's, then `/demo` unless it has its own. */
export function withDemo(commands: readonly CommandView[]): CommandView[] {
  return commands.some((c) => c.name === DEMO_COMMAND.name) ? [...commands] : [...commands, DEMO_COMMAND];
}

/** What the input is filled with for a scenario that acts on the prompt's text, to edit and send. */
export function demoExample(scenario: DemoScenario): string {
  if (/\bJSON\b/.test(scenario.description)) {
    return '[["read", {"path": "README.md"}]]';
  }
  if (/\bpath\b/.test(scenario.description)) {
    return 'README.md';
  }
  return 'echo hello from the demo';
}
