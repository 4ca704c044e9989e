/** What the chat's parts (the view, Restore checkpoint) get from the extension: the bridge's session, the workspace folder, the log. */
import type * as vscode from 'vscode';
import type { Session } from '../bridge/session';

export interface ChatHost {
  /** The session on a running bridge (starting it if needed). */
  session(): Promise<Session>;
  /** The workspace folder pi runs in. */
  cwd(): string | undefined;
  log: vscode.LogOutputChannel;
}
