/**
 * "Restore checkpoint" of the chat (a user message's button, pi: Restore Checkpoint…): pick files,
 * conversation or both, see the files a dry run of `pi/rewind` says would change (each with Open
 * Diff: the file at the checkpoint, from `pi/checkpointFile`, against the workspace's file; a
 * conflict as such, with a choice to overwrite it), then rewind. After a conversation rewind the
 * chat continues in the session the bridge returns, with the rewound prompt in the input.
 */
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
  checkpointOfTurn,
  CheckpointMethods,
  checkpointTitle,
  listCheckpoints,
  previewFiles,
  RESTORE_CHOICES,
  rewindSummary,
  type Checkpoint,
  type CheckpointFile,
  type CheckpointsResult,
  type PreviewFile,
  type RestoreWhat,
  type RewindParams,
  type RewindResult,
  type TurnPlace,
} from './checkpointPlan';
import { relativeTime } from '../conversation/conversation';
import type { Session } from '../../bridge/session';
import type { ChatHost } from '../host';

export const CHECKPOINT_SCHEME = 'pi-bridge-checkpoint';

export interface CheckpointDeps extends ChatHost {
  /** The shown conversation: its pi session, whether it runs, where turn `turnId` is in it. */
  conversation(): { sessionId: string | null; running: boolean; turnPlace(turnId: string): TurnPlace | undefined };
  /** Show session `sessionId` in the chat and put `prompt` in its input (after a conversation rewind). */
  continueIn(sessionId: string, prompt: string): Promise<void>;
}

type PreviewItem = vscode.QuickPickItem & ({ action: 'restore' | 'force' } | { file: PreviewFile });

const DIFF_BUTTON: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('diff'), tooltip: 'Open Diff' };

export class Checkpoints implements vscode.TextDocumentContentProvider, vscode.Disposable {
  /** Texts at a checkpoint served for the diffs, by URI query. */
  private readonly texts = new Map<string, string>();
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly deps: CheckpointDeps) {
    this.disposables.push(
      vscode.workspace.registerTextDocumentContentProvider(CHECKPOINT_SCHEME, this),
      vscode.commands.registerCommand('piBridge.restoreCheckpoint', (turnId?: unknown) =>
        this.restore(typeof turnId === 'string' ? turnId : undefined),
      ),
    );
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.query) ?? '';
  }

  /**
   * Restore the checkpoint before turn `turnId` of the shown conversation (none: the user picks
   * one of the conversation's checkpoints).
   */
  async restore(turnId?: string): Promise<void> {
    const conversation = this.deps.conversation();
    const sessionId = conversation.sessionId;
    if (!sessionId) {
      void vscode.window.showInformationMessage('pi: this conversation has no checkpoint yet: send a prompt first.');
      return;
    }
    if (conversation.running) {
      void vscode.window.showInformationMessage('pi: a run of this conversation is going; stop it or wait, then restore.');
      return;
    }
    try {
      const session = await this.deps.session();
      const place = turnId ? conversation.turnPlace(turnId) : undefined;
      const list = await listCheckpoints(
        (params) => session.request<CheckpointsResult>(CheckpointMethods.checkpoints, params),
        sessionId,
        place?.runId,
      );
      if (!list.available) {
        void vscode.window.showInformationMessage(`pi: checkpoints are off: ${list.reason ?? 'the bridge gave no reason'}`);
        return;
      }
      const checkpoint = (place && checkpointOfTurn(list.checkpoints, place)) ?? (await this.pickCheckpoint(list.checkpoints));
      if (!checkpoint) {
        return;
      }
      const what = await this.pickWhat(checkpoint);
      if (!what) {
        return;
      }
      const params: RewindParams = { sessionId, checkpointId: checkpoint.checkpointId, restore: what };
      if (what !== 'conversation') {
        const dry = await session.request<RewindResult>(CheckpointMethods.rewind, { ...params, dryRun: true });
        const decision = await this.preview(session, params, checkpoint, dry);
        if (!decision) {
          return;
        }
        params.force = decision === 'force';
      }
      const result = await session.request<RewindResult>(CheckpointMethods.rewind, params);
      this.deps.log.info(
        `rewind ${checkpoint.checkpointId} (${what}${params.force ? ', forced' : ''}): restored ${result.restored.length}, conflicts ${result.conflicts.length}, session ${result.sessionId}`,
      );
      if (what !== 'files') {
        await this.deps.continueIn(result.sessionId, checkpoint.prompt);
      }
      void vscode.window.showInformationMessage(rewindSummary(what, result, checkpoint.prompt));
    } catch (err) {
      this.deps.log.warn(`restore checkpoint: ${String(err)}`);
      void vscode.window.showErrorMessage(`pi: could not restore the checkpoint: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private async pickCheckpoint(checkpoints: readonly Checkpoint[]): Promise<Checkpoint | undefined> {
    if (checkpoints.length === 0) {
      void vscode.window.showInformationMessage('pi: this conversation has no checkpoint.');
      return undefined;
    }
    const now = Date.now();
    const picked = await vscode.window.showQuickPick(
      [...checkpoints].reverse().map((checkpoint) => ({
        label: checkpointTitle(checkpoint),
        description: relativeTime(checkpoint.createdAt, now),
        detail: checkpoint.files.length > 0 ? `its turn changed ${checkpoint.files.join(', ')}` : 'its turn changed no file',
        checkpoint,
      })),
      { title: 'pi: Restore Checkpoint', placeHolder: 'Which prompt? The checkpoint is the workspace before it ran', matchOnDetail: true },
    );
    return picked?.checkpoint;
  }

  private async pickWhat(checkpoint: Checkpoint): Promise<RestoreWhat | undefined> {
    const notes = checkpoint.notes?.length ? ` (${checkpoint.notes.join('; ')})` : '';
    const picked = await vscode.window.showQuickPick(
      RESTORE_CHOICES.map((choice) => ({ label: choice.label, detail: choice.detail, what: choice.what })),
      { title: `pi: Restore checkpoint ${checkpointTitle(checkpoint)}`, placeHolder: `Restore what?${notes}` },
    );
    return picked?.what;
  }

  /**
   * The files the dry run would change, each with Open Diff; resolves with the user's choice
   * (restore, or restore and overwrite the conflicts), undefined when they close it.
   */
  private async preview(
    session: Session,
    params: RewindParams,
    checkpoint: Checkpoint,
    dry: RewindResult,
  ): Promise<'restore' | 'force' | undefined> {
    const cwd = this.deps.cwd() ?? '';
    const absolute = (file: string): string => (path.isAbsolute(file) ? file : path.join(cwd, file));
    const olds = new Map<string, CheckpointFile>();
    await Promise.all(
      [...dry.restored, ...dry.conflicts].slice(0, 200).map(async (file) => {
        try {
          const old = await session.request<CheckpointFile>(CheckpointMethods.checkpointFile, {
            sessionId: params.sessionId,
            checkpointId: params.checkpointId,
            path: file,
          });
          olds.set(file, old);
        } catch (err) {
          this.deps.log.warn(`pi/checkpointFile ${file}: ${String(err)}`);
        }
      }),
    );
    const files = previewFiles(
      dry,
      (file) => (olds.has(file) ? olds.get(file)!.content !== null : undefined),
      (file) => existsSync(absolute(file)),
    );
    const conflicts = dry.conflicts.length;
    const also = params.restore === 'both' ? ' and the conversation' : '';
    const items: PreviewItem[] = [
      {
        label: '$(check) Restore',
        description: `${files.length - conflicts} file(s)${also}`,
        detail: conflicts > 0 ? `Keeps the ${conflicts} conflicting file(s) as they are` : undefined,
        action: 'restore',
      },
    ];
    if (conflicts > 0) {
      items.push({
        label: '$(warning) Restore and overwrite the conflicts',
        description: `${files.length} file(s)${also}`,
        detail: 'Also puts back the files changed after the checkpoint by someone else than pi',
        action: 'force',
      });
    }
    items.push({ label: files.length > 0 ? 'files: Enter opens the diff' : 'no file changes', kind: vscode.QuickPickItemKind.Separator } as PreviewItem);
    for (const file of files) {
      items.push({
        label: file.change === 'conflict' ? `$(warning) ${file.path}` : file.path,
        description: file.description,
        buttons: [DIFF_BUTTON],
        file,
      });
    }
    const pick = vscode.window.createQuickPick<PreviewItem>();
    pick.title = `pi: Restore checkpoint ${checkpointTitle(checkpoint)}: ${files.length} file(s) would change`;
    pick.placeholder = 'Check the files, then Restore (Escape: cancel)';
    pick.items = items;
    pick.ignoreFocusOut = true;
    pick.matchOnDescription = true;
    const openDiff = (file: PreviewFile): Promise<void> => this.openDiff(params, file, olds.get(file.path), absolute(file.path));
    return new Promise((resolve) => {
      let decided: 'restore' | 'force' | undefined;
      pick.onDidTriggerItemButton((e) => {
        if ('file' in e.item) {
          void openDiff(e.item.file);
        }
      });
      pick.onDidAccept(() => {
        const item = pick.selectedItems[0];
        if (!item) {
          return;
        }
        if ('file' in item) {
          void openDiff(item.file);
          return;
        }
        decided = item.action;
        pick.hide();
      });
      pick.onDidHide(() => {
        pick.dispose();
        resolve(decided);
      });
      pick.show();
    });
  }

  /** The file at the checkpoint (left) against the workspace's file now (right). */
  private async openDiff(params: RewindParams, file: PreviewFile, old: CheckpointFile | undefined, absolute: string): Promise<void> {
    if (!old) {
      void vscode.window.showInformationMessage(`pi: the text of ${file.path} at the checkpoint could not be read.`);
      return;
    }
    if (old.binary) {
      void vscode.window.showInformationMessage(`pi: ${file.path} is a binary file: no diff to show.`);
      return;
    }
    const key = `${params.checkpointId}/${file.path}`;
    this.texts.set(key, old.content ?? '');
    const left = vscode.Uri.from({ scheme: CHECKPOINT_SCHEME, path: absolute, query: key });
    let right = vscode.Uri.file(absolute);
    if (!existsSync(absolute)) {
      this.texts.set(`${key}/now`, '');
      right = vscode.Uri.from({ scheme: CHECKPOINT_SCHEME, path: absolute, query: `${key}/now` });
    }
    await vscode.commands.executeCommand('vscode.diff', left, right, `${path.basename(file.path)} (checkpoint ↔ now)`, {
      preserveFocus: true,
      preview: true,
    });
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
