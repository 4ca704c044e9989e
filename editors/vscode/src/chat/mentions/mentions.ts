/**
 * @-mentions on the host: the completions of a typed `@word` (the workspace's files and folders,
 * and the editor's selection) and the context a sent message's mentions stand for (the file's
 * text, the folder's names, the selected lines), which go with the prompt as chips do.
 */
import * as vscode from 'vscode';
import { foldersOf, mentionsIn, rankMentions, SELECTION_MENTION, type MentionItem } from './mentionText';
import type { ContextData } from '../prompts';

/** Files listed at most for completion (a huge workspace completes from the first ones found). */
const MAX_FILES = 5000;
const EXCLUDE = '{**/node_modules/**,**/.git/**,**/.venv/**,**/__pycache__/**}';

export class Mentions {
  private files: Promise<string[]> | undefined;
  private readonly watcher: vscode.Disposable;

  constructor() {
    // A created or deleted file changes the list: it is read again on the next completion.
    const forget = (): void => {
      this.files = undefined;
    };
    const watcher = vscode.workspace.createFileSystemWatcher('**/*', false, true, false);
    this.watcher = vscode.Disposable.from(watcher, watcher.onDidCreate(forget), watcher.onDidDelete(forget));
  }

  dispose(): void {
    this.watcher.dispose();
  }

  private workspaceFiles(): Promise<string[]> {
    this.files ??= Promise.resolve(vscode.workspace.findFiles('**/*', EXCLUDE, MAX_FILES)).then((uris) =>
      uris.map((uri) => vscode.workspace.asRelativePath(uri, false)).sort(),
    );
    return this.files;
  }

  /** The completions of `@query`: the selection (when there is one), then files and folders. */
  async complete(query: string): Promise<MentionItem[]> {
    const items: MentionItem[] = [];
    const editor = vscode.window.activeTextEditor;
    if (editor && !editor.selection.isEmpty && SELECTION_MENTION.startsWith(query.toLowerCase())) {
      const sel = editor.selection;
      items.push({
        mention: SELECTION_MENTION,
        kind: 'selection',
        detail: `lines ${sel.start.line + 1}-${sel.end.line + 1} of ${vscode.workspace.asRelativePath(editor.document.uri, false)}`,
      });
    }
    const files = await this.workspaceFiles();
    const folders = new Set(foldersOf(files));
    for (const path of rankMentions(query, [...folders, ...files])) {
      items.push({ mention: path, kind: folders.has(path) ? 'folder' : 'file', detail: folders.has(path) ? 'folder' : '' });
    }
    return items;
  }

  /** The context of each mention of `text` that names the selection or a workspace file or folder. */
  async resolve(text: string): Promise<ContextData[]> {
    const found: ContextData[] = [];
    for (const mention of mentionsIn(text)) {
      const context = await this.resolveOne(mention);
      if (context) {
        found.push(context);
      }
    }
    return found;
  }

  private async resolveOne(mention: string): Promise<ContextData | null> {
    if (mention === SELECTION_MENTION) {
      const editor = vscode.window.activeTextEditor;
      if (!editor || editor.selection.isEmpty) {
        return null;
      }
      const sel = editor.selection;
      return {
        kind: 'selection',
        path: vscode.workspace.asRelativePath(editor.document.uri, false),
        languageId: editor.document.languageId,
        startLine: sel.start.line + 1,
        endLine: sel.end.line + 1,
        text: editor.document.getText(sel),
      };
    }
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder) {
      return null;
    }
    const relative = mention.replace(/\/$/, '');
    const uri = vscode.Uri.joinPath(folder.uri, relative);
    // Only a path inside the workspace: `..` would name files the user did not mean to share.
    if (relative.split('/').includes('..')) {
      return null;
    }
    try {
      const stat = await vscode.workspace.fs.stat(uri);
      if (stat.type & vscode.FileType.Directory) {
        const entries = await vscode.workspace.fs.readDirectory(uri);
        return {
          kind: 'folder',
          path: relative,
          entries: entries.map(([name, type]) => (type & vscode.FileType.Directory ? `${name}/` : name)).sort(),
        };
      }
      const doc = await vscode.workspace.openTextDocument(uri);
      return { kind: 'file', path: relative, languageId: doc.languageId, text: doc.getText() };
    } catch {
      return null; // not a path of the workspace: the word stays a word
    }
  }
}
