/**
 * The extension's settings as one typed, fully defaulted object, and what follows from them: how
 * to start the bridge and the params of a run. No `vscode` import; controller.ts reads the values.
 */
import { SANDBOX_MODES, type InitializationOptions, type RunParams, type SandboxMode } from './protocol';

export const THINKING_LEVELS = ['off', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;
export type ThinkingLevel = (typeof THINKING_LEVELS)[number];

export interface Settings {
  bridgeCommand: string;
  bridgeArgs: string[];
  bridgeEnv: Record<string, string>;
  piCommand: string[];
  provider: string;
  model: string;
  thinking: ThinkingLevel | '';
  liveThoughts: boolean;
  /** How each run's tool commands are confined; `off` sends no `sandbox` (the bridge's default). */
  sandboxMode: SandboxMode;
  /** Whether sandboxed commands may use the network; meaningless when sandboxMode is `off`. */
  sandboxNetwork: boolean;
  /** initializationOptions.agents: more agents for the chat's agent picker (the bridge checks them). */
  agents: NonNullable<InitializationOptions['agents']>;
}

export const DEFAULT_SETTINGS: Settings = {
  // Empty: the bridge bundled in the extension, run by the chosen Python (install.ts).
  bridgeCommand: '',
  bridgeArgs: [],
  bridgeEnv: {},
  piCommand: [],
  provider: '',
  model: '',
  thinking: '',
  liveThoughts: false,
  sandboxMode: 'off',
  sandboxNetwork: false,
  agents: {},
};

/** Settings whose change needs a bridge restart (the others are read at each run). */
/**
 * The documents the language client syncs with the bridge: every file on disk the user opens (not
 * untitled buffers, output channels or git views), so an agent's write to one goes through the
 * editor (`workspace/applyEdit`) and never behind unsaved changes.
 */
export const SYNCED_DOCUMENTS: readonly { scheme: string }[] = [{ scheme: 'file' }];

export const RESTART_KEYS = ['piBridge.bridge', 'piBridge.pi.command', 'piBridge.agents'] as const;

function stringList(value: unknown): string[] | undefined {
  return Array.isArray(value) && value.every((v) => typeof v === 'string') ? value : undefined;
}

/** An object (its entries are the bridge's to judge: a bad one is its warning, naming the field). */
function objectOf<T>(value: unknown): T | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as T) : undefined;
}

function stringMap(value: unknown): Record<string, string> | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return undefined;
  }
  const entries = Object.entries(value);
  return entries.every(([, v]) => typeof v === 'string') ? Object.fromEntries(entries) : undefined;
}

/**
 * Build Settings from a getter of raw values (`WorkspaceConfiguration.get` in the editor). A bad
 * value falls back to its default and is reported through `warn`, never thrown.
 */
export function readSettings(get: (key: string) => unknown, warn: (message: string) => void = () => undefined): Settings {
  const pick = <T>(key: string, parse: (v: unknown) => T | undefined, fallback: T): T => {
    const raw = get(key);
    if (raw === undefined || raw === null) {
      return fallback;
    }
    const parsed = parse(raw);
    if (parsed === undefined) {
      warn(`piBridge.${key}: ignoring invalid value ${JSON.stringify(raw)}`);
      return fallback;
    }
    return parsed;
  };
  const str = (v: unknown): string | undefined => (typeof v === 'string' ? v.trim() : undefined);
  const d = DEFAULT_SETTINGS;
  return {
    bridgeCommand: pick('bridge.command', str, d.bridgeCommand),
    bridgeArgs: pick('bridge.args', stringList, d.bridgeArgs),
    bridgeEnv: pick('bridge.env', stringMap, d.bridgeEnv),
    piCommand: pick('pi.command', stringList, d.piCommand),
    provider: pick('pi.provider', str, d.provider),
    model: pick('pi.model', str, d.model),
    thinking: pick(
      'pi.thinking',
      (v) => (v === '' || (THINKING_LEVELS as readonly unknown[]).includes(v) ? (v as ThinkingLevel | '') : undefined),
      d.thinking,
    ),
    liveThoughts: pick('pi.liveThoughts', (v) => (typeof v === 'boolean' ? v : undefined), d.liveThoughts),
    sandboxMode: pick(
      'sandbox.mode',
      (v) => ((SANDBOX_MODES as readonly unknown[]).includes(v) ? (v as SandboxMode) : undefined),
      d.sandboxMode,
    ),
    sandboxNetwork: pick('sandbox.network', (v) => (typeof v === 'boolean' ? v : undefined), d.sandboxNetwork),
    agents: pick('agents', objectOf<Settings['agents']>, d.agents),
  };
}

export interface BridgeLaunch {
  command: string;
  args: string[];
  env: Record<string, string>;
  initializationOptions: InitializationOptions;
}

/**
 * How to start the bridge bundled in the extension: `python -m bridge` with the bundled libraries
 * of that Python's version as the only addition to its path. PYTHONSAFEPATH keeps a `bridge`
 * folder in the workspace from shadowing the bundled one; user site-packages are left out.
 */
export function bundledLaunch(
  settings: Settings,
  baseEnv: NodeJS.ProcessEnv,
  python: string,
  libs: string,
): BridgeLaunch {
  const launch = bridgeLaunch({ ...settings, bridgeCommand: python }, baseEnv);
  Object.assign(launch.env, { PYTHONPATH: libs, PYTHONSAFEPATH: '1', PYTHONNOUSERSITE: '1' });
  return { ...launch, args: ['-m', 'bridge', ...settings.bridgeArgs] };
}

/** `launch` asking the bridge's doctor instead of serving: `<command> <args> [--pi-command …] doctor --json`. */
export function doctorArgs(launch: BridgeLaunch): string[] {
  const args = launch.args.at(-1) === 'serve' ? launch.args.slice(0, -1) : [...launch.args];
  const piCommand = launch.initializationOptions.piCommand;
  if (piCommand) {
    args.push('--pi-command', piCommand.map((arg) => `'${arg.replaceAll("'", "'\\''")}'`).join(' '));
  }
  return [...args, 'doctor', '--json'];
}

/** How to start the bridge as piBridge.bridge.command says. */
export function bridgeLaunch(settings: Settings, baseEnv: NodeJS.ProcessEnv): BridgeLaunch {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(baseEnv)) {
    if (value !== undefined) {
      env[key] = value;
    }
  }
  Object.assign(env, settings.bridgeEnv);
  const initializationOptions: InitializationOptions = {};
  if (settings.piCommand.length > 0) {
    initializationOptions.piCommand = settings.piCommand as [string, ...string[]];
  }
  if (Object.keys(settings.agents).length > 0) {
    initializationOptions.agents = settings.agents;
  }
  return { command: settings.bridgeCommand, args: settings.bridgeArgs, env, initializationOptions };
}

/** The params of a pi/run for `prompt` under these settings. */
export function runParams(settings: Settings, prompt: string, runId: string, cwd?: string): RunParams {
  const params: RunParams = { prompt, runId };
  if (cwd) {
    params.cwd = cwd;
  }
  if (settings.provider) {
    params.provider = settings.provider;
  }
  if (settings.model) {
    params.model = settings.model;
  }
  if (settings.thinking) {
    params.thinking = settings.thinking;
  }
  if (settings.liveThoughts) {
    params.liveThoughts = true;
  }
  // Nothing for `off`: the run takes the bridge's own default (none unless the bridge was started
  // with one), and the params of a user who never set a sandbox stay as they were before sandboxes.
  if (settings.sandboxMode !== 'off') {
    params.sandbox = { mode: settings.sandboxMode, network: settings.sandboxNetwork };
  }
  return params;
}
