/**
 * What the status bar's sandbox item says: the sandbox the settings ask for, and whether the bridge
 * can give it. No `vscode` import, so the words are unit-tested; controller.ts shows them.
 */
import type { Settings } from './config';
import { SANDBOX_MODE_DESCRIPTIONS, type SandboxAvailability } from './protocol';

export interface SandboxStatus {
  /** The item's text, with its codicon. */
  text: string;
  tooltip: string;
  /** What a screen reader says for the item. */
  label: string;
  /**
   * True when a sandbox is asked for and the bridge said it cannot give one: every run would fail
   * at once (error kind `sandbox`), so the item warns before the user sends a prompt.
   */
  unavailable: boolean;
}

/**
 * The item for these settings. `availability` is the running bridge's initialize answer
 * (`capabilities.experimental.piBridge.sandbox`); undefined while no bridge runs, or from a bridge
 * that predates sandboxes, and then nothing is claimed about it.
 */
export function sandboxStatus(
  settings: Pick<Settings, 'sandboxMode' | 'sandboxNetwork'>,
  availability?: SandboxAvailability | null,
): SandboxStatus {
  const mode = settings.sandboxMode;
  const click = 'Click to pick the sandbox.';
  if (mode === 'off') {
    return {
      text: '$(unlock) no sandbox',
      tooltip: `pi sandbox: off. The agent's ${SANDBOX_MODE_DESCRIPTIONS.off}. ${click}`,
      label: 'pi sandbox: off',
      unavailable: false,
    };
  }
  const network = settings.sandboxNetwork;
  const networkWords = network ? 'Network: on.' : 'Network: off (none at all, loopback included).';
  const unavailable = availability?.available === false;
  const why = unavailable
    ? ` ${sentence(`The bridge cannot sandbox here: ${availability.reason ?? 'it gave no reason'}`)}${
        availability.fix ? ` ${sentence(`Fix: ${availability.fix}`)}` : ''
      } Until then every run fails at once.`
    : '';
  return {
    text: `${unavailable ? '$(warning)' : '$(lock)'} ${mode}${network ? ' · net' : ''}`,
    tooltip: `pi sandbox: ${mode}. The agent's ${SANDBOX_MODE_DESCRIPTIONS[mode]}. ${networkWords}${why} Applies from the next prompt. ${click}`,
    label: `pi sandbox: ${mode}, network ${network ? 'on' : 'off'}${unavailable ? ', not available here' : ''}`,
    unavailable,
  };
}

/** `text` ending with a full stop, unless it ends with one already (the bridge's reasons may). */
function sentence(text: string): string {
  return /[.!?…]$/.test(text) ? text : `${text}.`;
}
