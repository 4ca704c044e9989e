/**
 * The conversation the chat showed last, kept in a file of the extension's storage folder.
 *
 * Why a file: the webview's own state (`vscode.setState`) is saved by the workbench on its own
 * schedule, so a window reloaded soon after the chat switched conversations restored the one
 * before. The extension host writes this file at once, and a reload reads it back.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export class LastConversation {
  constructor(private readonly file: string | undefined) {}

  /** The session shown last (null: a new conversation); undefined when nothing was kept. */
  get(): string | null | undefined {
    if (!this.file) {
      return undefined;
    }
    try {
      const kept: unknown = JSON.parse(readFileSync(this.file, 'utf8'));
      const sessionId = (kept as { sessionId?: unknown } | null)?.sessionId;
      return typeof sessionId === 'string' ? sessionId : null;
    } catch {
      return undefined;
    }
  }

  set(sessionId: string | null): void {
    if (!this.file) {
      return;
    }
    try {
      mkdirSync(dirname(this.file), { recursive: true });
      writeFileSync(this.file, JSON.stringify({ sessionId }));
    } catch {
      // Not kept: a reload falls back on the webview's own state.
    }
  }
}
