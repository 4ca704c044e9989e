/**
 * Checkpoints and rewind (contract, turn 3) without the `vscode` module: the wire's types, which
 * checkpoint a turn of the chat is, and what the preview of a rewind lists. checkpoints.ts shows
 * them; the tests check them without a VS Code.
 */
import { promptTitle } from '../prompts';
import type {
  CheckpointFileResult,
  CheckpointInfo,
  CheckpointsResult,
  RewindParams,
  RewindResult,
} from '../../generated/protocol';

/** What `pi/checkpoints`, `pi/rewind` and `pi/checkpointFile` are called on the wire. */
export const CheckpointMethods = {
  checkpoints: 'pi/checkpoints',
  rewind: 'pi/rewind',
  checkpointFile: 'pi/checkpointFile',
} as const;

/** The contract's types of checkpoints and rewind (generated from docs/protocol.schema.json). */
export type Checkpoint = CheckpointInfo;
export type CheckpointFile = CheckpointFileResult;
export type RestoreWhat = RewindParams['restore'];
export type { CheckpointsResult, RewindParams, RewindResult };

/**
 * The conversation's checkpoints, once the one of run `runId` is among them (when given): the
 * bridge records a turn's checkpoint just after the turn has answered, so a list asked for right
 * then may not hold it yet; asked again a bounded number of times, then taken as it is.
 */
export async function listCheckpoints(
  request: (params: { sessionId: string }) => Promise<CheckpointsResult>,
  sessionId: string,
  runId?: string | null,
  tries = 30,
): Promise<CheckpointsResult> {
  let list = await request({ sessionId });
  for (let i = 1; i < tries && runId && list.available && !list.checkpoints.some((c) => c.runId === runId); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100)); // the bridge sends no event for it
    list = await request({ sessionId });
  }
  return list;
}

/** A turn of the chat, as far as finding its checkpoint goes. */
export interface TurnPlace {
  /** Its place among the turns the chat shows (0: the oldest shown). */
  index: number;
  /** How many turns the chat shows. */
  count: number;
  prompt: string;
  /** The run id of a turn run in this window (null: a turn from the session's history). */
  runId: string | null;
}

/**
 * The checkpoint taken before `turn` ran: the one of its run id, else the one at the same place
 * counted from the newest (the session's history may leave its oldest turns out, and old
 * checkpoints are pruned) when its prompt is the turn's, else the newest one with the turn's prompt.
 */
export function checkpointOfTurn(checkpoints: readonly Checkpoint[], turn: TurnPlace): Checkpoint | undefined {
  if (turn.runId) {
    const byRun = checkpoints.find((c) => c.runId === turn.runId);
    if (byRun) {
      return byRun;
    }
  }
  const samePrompt = (c: Checkpoint): boolean => c.prompt === turn.prompt || c.prompt.startsWith(`${turn.prompt}\n`);
  const aligned = checkpoints[checkpoints.length - (turn.count - turn.index)];
  if (aligned && samePrompt(aligned)) {
    return aligned;
  }
  return [...checkpoints].reverse().find(samePrompt);
}

/** How a file of a rewind's preview changes. */
export type FileChange = 'restored' | 'removed' | 'recreated' | 'conflict';

export interface PreviewFile {
  path: string;
  change: FileChange;
  /** The quick pick's description of it. */
  description: string;
}

const CHANGE_TEXT: Record<FileChange, string> = {
  restored: 'back to its text at the checkpoint',
  removed: 'created since the checkpoint: will be removed',
  recreated: 'deleted since the checkpoint: will come back',
  conflict: 'conflict: changed since by someone else than pi; kept unless overwritten',
};

/**
 * The files a dry run said would change, each with how: `before` tells whether it existed at the
 * checkpoint (undefined: not known), `exists` whether it does now. Conflicts come last.
 */
export function previewFiles(
  dry: Pick<RewindResult, 'restored' | 'conflicts'>,
  before: (path: string) => boolean | undefined,
  exists: (path: string) => boolean,
): PreviewFile[] {
  const files: PreviewFile[] = dry.restored.map((path) => {
    const existed = before(path);
    const change: FileChange = existed === false ? 'removed' : !exists(path) ? 'recreated' : 'restored';
    return { path, change, description: CHANGE_TEXT[change] };
  });
  for (const path of dry.conflicts) {
    files.push({ path, change: 'conflict', description: CHANGE_TEXT.conflict });
  }
  return files;
}

/** The restore choices of a checkpoint, in the order the quick pick lists them. */
export const RESTORE_CHOICES: readonly { what: RestoreWhat; label: string; detail: string }[] = [
  {
    what: 'both',
    label: '$(discard) Files and conversation',
    detail: 'Put the files back as they were before this prompt, and continue the conversation from before it',
  },
  {
    what: 'files',
    label: '$(file) Files only',
    detail: 'Put the files back as they were before this prompt; the conversation goes on as it is',
  },
  {
    what: 'conversation',
    label: '$(comment-discussion) Conversation only',
    detail: 'Continue the conversation from before this prompt (the current one stays in Open Conversation…); the files stay',
  },
];

/** "before “fix the parser”" for a title. */
export function checkpointTitle(checkpoint: Pick<Checkpoint, 'prompt'>): string {
  return `before “${promptTitle(checkpoint.prompt, 60)}”`;
}

/** What a finished rewind did, in one sentence for a notification. */
export function rewindSummary(what: RestoreWhat, result: Pick<RewindResult, 'restored' | 'conflicts'>, prompt: string): string {
  const parts: string[] = [];
  if (what !== 'conversation') {
    parts.push(result.restored.length === 1 ? 'restored 1 file' : `restored ${result.restored.length} files`);
    if (result.conflicts.length > 0) {
      parts.push(`kept ${result.conflicts.length} changed after the checkpoint (${result.conflicts.join(', ')})`);
    }
  }
  if (what !== 'files') {
    parts.push(`the conversation continues from before “${promptTitle(prompt, 60)}”`);
  }
  return `pi: ${parts.join('; ')}.`;
}
