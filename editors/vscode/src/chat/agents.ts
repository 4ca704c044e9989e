/**
 * The chat header's agent picker, without the `vscode` module: what it lists from the bridge's
 * `initialize` answer (a missing agent shown disabled, with why) and which one a conversation runs.
 */
import type { AgentInfo } from '../bridge/protocol';
import type { AgentView, HostToView } from './chatProtocol';

/** The agents a run can name and the bridge's default, as `initialize` said. */
export interface AgentList {
  agents: AgentInfo[];
  defaultAgent: string | null;
}

/** Why an agent cannot be picked (null when it can). */
export function unavailableWhy(agent: AgentInfo): string | null {
  return agent.found ? null : `not found: ${agent.command.join(' ')}`;
}

/** One agent as the picker shows it: its name and version; a missing one disabled, saying why. */
export function agentView(agent: AgentInfo): AgentView {
  const why = unavailableWhy(agent);
  const version = agent.version ? ` ${agent.version}` : '';
  return {
    name: agent.name,
    label: why ? `${agent.name} (not found)` : `${agent.name}${version}`,
    enabled: why === null,
    why,
  };
}

/** The agent a conversation runs: its pick, else the bridge's default, else pi. */
export function agentOf(list: AgentList, picked: string | null): string {
  return picked ?? list.defaultAgent ?? 'pi';
}

/** What the header's picker shows for a conversation that picked `picked` (null: none). */
export function agentChoices(list: AgentList, picked: string | null): HostToView['agents'] {
  return { agents: list.agents.map(agentView), current: agentOf(list, picked) };
}

/**
 * Whether `name` can be picked: one the bridge lists and found. The reason when not (the picker
 * disables such an entry; a message from elsewhere is checked again).
 */
export function pickable(list: AgentList, name: string): string | null {
  const agent = list.agents.find((a) => a.name === name);
  if (!agent) {
    return `the bridge lists no agent named ${name}`;
  }
  return unavailableWhy(agent);
}
