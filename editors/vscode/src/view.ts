/**
 * The "Runs" webview view: shows every run of this window as it streams (markdown text, collapsed
 * thoughts, tool calls with live status, final state and usage). Rendering happens in render.ts;
 * updates of one run are coalesced so a fast stream costs one repaint per frame, not per token.
 */
import { randomUUID } from 'node:crypto';
import * as vscode from 'vscode';
import { renderRun } from './render';
import type { RunRecord } from './bridge/run';

const FRAME_MS = 50;
const MAX_RUNS = 50;

export class RunsView implements vscode.WebviewViewProvider, vscode.Disposable {
  static readonly viewId = 'piBridge.run';

  private view: vscode.WebviewView | undefined;
  private ready = false;
  private readonly runs = new Map<string, RunRecord>();
  private readonly pending = new Set<string>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly extensionUri: vscode.Uri) {}

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    this.ready = false;
    const media = vscode.Uri.joinPath(this.extensionUri, 'media');
    view.webview.options = { enableScripts: true, localResourceRoots: [media] };
    view.webview.html = this.html(view.webview, media);
    this.disposables.push(
      view.webview.onDidReceiveMessage((msg: { type?: string }) => {
        if (msg.type === 'ready') {
          this.ready = true;
          for (const runId of this.runs.keys()) {
            this.pending.add(runId);
          }
          this.flush();
        }
      }),
      view.onDidDispose(() => {
        this.view = undefined;
        this.ready = false;
      }),
    );
  }

  /** Reveal the view (creating it if needed) without taking the focus from the editor. */
  async reveal(): Promise<void> {
    if (this.view) {
      this.view.show(true);
    } else {
      await vscode.commands.executeCommand(`${RunsView.viewId}.focus`, { preserveFocus: true });
    }
  }

  /** Show the record's current state; the final state (not running) is painted at once. */
  update(record: RunRecord): void {
    if (!this.runs.has(record.runId)) {
      this.runs.set(record.runId, record);
      this.trim();
    }
    this.pending.add(record.runId);
    if (record.status !== 'running') {
      this.flush();
    } else if (this.timer === undefined) {
      this.timer = setTimeout(() => this.flush(), FRAME_MS);
    }
  }

  clear(): void {
    for (const [runId, record] of this.runs) {
      if (record.status !== 'running') {
        this.runs.delete(runId);
      }
    }
    void this.view?.webview.postMessage({ type: 'clear' });
    for (const runId of this.runs.keys()) {
      this.pending.add(runId);
    }
    this.flush();
  }

  private trim(): void {
    for (const [runId, record] of this.runs) {
      if (this.runs.size <= MAX_RUNS) {
        break;
      }
      if (record.status !== 'running') {
        this.runs.delete(runId);
      }
    }
  }

  private flush(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (!this.view || !this.ready) {
      return;
    }
    for (const runId of this.pending) {
      const record = this.runs.get(runId);
      if (record) {
        void this.view.webview.postMessage({
          type: 'run',
          runId: record.runId,
          status: record.status,
          html: renderRun(record),
        });
      }
    }
    this.pending.clear();
  }

  private html(webview: vscode.Webview, media: vscode.Uri): string {
    const nonce = randomUUID().replace(/-/g, '');
    const css = webview.asWebviewUri(vscode.Uri.joinPath(media, 'view.css'));
    const js = webview.asWebviewUri(vscode.Uri.joinPath(media, 'view.js'));
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${webview.cspSource}; img-src ${webview.cspSource} https: data:; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${css.toString()}">
<title>pi runs</title>
</head>
<body>
<div id="empty">No runs yet. Run <b>pi: Ask…</b> from the Command Palette, or ask about a selection from the editor's context menu.</div>
<main id="runs"></main>
<script nonce="${nonce}" src="${js.toString()}"></script>
</body>
</html>`;
  }

  dispose(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
    }
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
