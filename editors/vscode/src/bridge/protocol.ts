/**
 * The pi-bridge wire contract as seen from TypeScript: method names mirrored once, plus the types
 * generated from docs/protocol.schema.json (src/generated/protocol.ts, rebuilt by every build).
 */
export type {
  AgentInfo,
  CancelParams,
  CancelResult,
  CancelledRunData,
  CommandInfo,
  CommandsResult,
  ContextUsage,
  DeleteSessionResult,
  ErrorInfo,
  FileDiff,
  HistoryTurn,
  InitializationOptions,
  PiMessage,
  RunInfo,
  RunParams,
  RunResult,
  RunsResult,
  SandboxAvailability,
  SandboxInfo,
  SandboxSettings,
  ServerCapabilities,
  SessionHistory,
  SessionNotFound,
  SessionSummary,
  SessionsResult,
  ShutdownReceipt,
  SteerResult,
  Usage,
  PermissionOption,
  PromptImage,
  PermissionRule,
  PermissionsResult,
  ProposedDiff,
  RequestPermissionAnswer,
  RequestPermissionParams,
  SetModeParams,
  SetModeResult,
  RenameSessionResult,
  ModelInfo,
  ModelsResult,
} from '../generated/protocol';

import type { CancelledRunData, PiMessage, SandboxSettings } from '../generated/protocol';


/** Method and notification names; the bridge defines them once in bridge/contract.py. */
export const Methods = {
  run: 'pi/run',
  cancel: 'pi/cancel',
  runs: 'pi/runs',
  steer: 'pi/steer',
  sessions: 'pi/sessions',
  session: 'pi/session',
  message: 'pi/message',
  /** server -> client: may this tool call run? */
  requestPermission: 'pi/requestPermission',
  setMode: 'pi/setMode',
  permissions: 'pi/permissions',
  setPermissions: 'pi/setPermissions',
  /** The conversation's `/` commands: pi's own (extensions, prompts, skills) and the bridge's. */
  commands: 'pi/commands',
  /** The models the conversation's agent can run (its own list) and the one it runs now. */
  models: 'pi/models',
  renameSession: 'pi/renameSession',
  deleteSession: 'pi/deleteSession',
} as const;

/** A conversation's permission mode (contract, turn 3), in the order the pickers list them. */
export const MODES = ['ask', 'auto-edit', 'plan', 'full'] as const;
export type Mode = (typeof MODES)[number];

/** What each mode does, in the pickers' words. */
export const MODE_DESCRIPTIONS: Record<Mode, string> = {
  ask: 'asks before edits and commands; reads run',
  'auto-edit': 'edits inside the workspace run; asks before commands',
  plan: 'read-only: edits and commands are refused',
  full: 'runs everything without asking',
};

/** How a run's tool commands are confined (contract "Sandbox"), in the order the pickers list them. */
export type SandboxMode = NonNullable<SandboxSettings['mode']>;
export const SANDBOX_MODES: readonly SandboxMode[] = ['off', 'workspace-write', 'read-only'];

/** What each sandbox mode confines, in the pickers' words (the agent itself is never confined). */
export const SANDBOX_MODE_DESCRIPTIONS: Record<SandboxMode, string> = {
  off: 'commands run unconfined, as you',
  'workspace-write': 'commands write only the workspace and a private /tmp; secrets masked',
  'read-only': 'commands write nothing outside a private /tmp; secrets masked',
};

export const PROTOCOL_VERSION = 1;
export const SERVER_NAME = 'pi-bridge';

/** JSON-RPC error codes the bridge answers with. */
export const ErrorCodes = {
  requestCancelled: -32800,
  invalidParams: -32602,
} as const;

export type PiMessageType = PiMessage['type'];

/** Narrow a pi/message to one type, e.g. `messageOf(msg, 'assistant')`. */
export type MessageOf<T extends PiMessageType> = Extract<PiMessage, { type: T }>;

/**
 * A message without its run envelope (`runId`, `attempt`, `seq`): what a live `pi/message` carries
 * and what a turn of `pi/session` holds, so one renderer shows both.
 */
export type ContractEntry = { [T in PiMessageType]: { type: T; content: MessageOf<T>['content'] } }[PiMessageType];

const RUN_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
let runCounter = 0;

/** A fresh client-chosen run id, valid for the contract's pattern and unique in this process. */
export function newRunId(prefix = 'vscode'): string {
  runCounter += 1;
  const id = `${prefix}-${Date.now().toString(36)}-${runCounter}`;
  if (!RUN_ID_PATTERN.test(id)) {
    throw new Error(`invalid run id prefix: ${prefix}`);
  }
  return id;
}

/** True when `data` is the `data` of the -32800 error that answers a cancelled pi/run. */
export function isCancelledRunData(data: unknown): data is CancelledRunData {
  return (
    typeof data === 'object' &&
    data !== null &&
    (data as { status?: unknown }).status === 'cancelled' &&
    typeof (data as { runId?: unknown }).runId === 'string'
  );
}

/** True when `value` looks like a pi/message notification (the bridge validates them strictly). */
export function isPiMessage(value: unknown): value is PiMessage {
  if (typeof value !== 'object' || value === null) {
    return false;
  }
  const v = value as Record<string, unknown>;
  return (
    typeof v.runId === 'string' &&
    typeof v.seq === 'number' &&
    typeof v.type === 'string' &&
    typeof v.content === 'object' &&
    v.content !== null
  );
}
