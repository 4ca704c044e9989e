/**
 * The chat in VS Code: the webview view that renders the current Conversation (conversation.ts),
 * its commands (New Conversation, Open Conversation…, Review Changes of This Run, context chips,
 * and the before-texts of edits, served on our own URI scheme for
 * `vscode.diff` / `vscode.changes`. The extension host is the source of truth: a (re)loaded
 * webview says "ready" with the sessionId its state kept, and gets the whole conversation again.
 */
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { CancellationToken } from 'vscode-jsonrpc';
import type { HostMessage, HostToView, SetupAction, ViewMessage } from './chatProtocol';
import { ruleLabel } from './approvals';
import { isDemo, withDemo } from './demo';
import { relativeTime, type Conversation, type ConversationMemory, type ConversationUsage } from './conversation/conversation';
import { Checkpoints } from './rewind/checkpoints';
import { Conversations } from './conversation/conversations';
import { chatPage } from './page';
import { Mentions } from './mentions/mentions';
import { agentChoices, agentOf, pickable, type AgentList } from './agents';
import {
  Methods,
  MODE_DESCRIPTIONS,
  MODES,
  type DeleteSessionResult,
  type PermissionsResult,
  type RenameSessionResult,
  type RequestPermissionAnswer,
  type RequestPermissionParams,
  type RunParams,
  type SessionSummary,
  type SessionsResult,
  type PromptImage,
} from '../bridge/protocol';
import type { LastConversation } from './conversation/lastConversation';
import type { ChatHost } from './host';

export const BEFORE_SCHEME = 'pi-bridge-before';

export interface ChatDeps extends ChatHost {
  runParams(prompt: string, runId: string): RunParams;
  /** The shown conversation's usage changed, or a run started or ended (the status bar). */
  onChange(): void;
  /** A first-run card's button (firstRun.ts). */
  onSetup(action: SetupAction): void;
  /** The header's model picker picked `provider/id` ('' for the agent's default; models.ts). */
  onPickModel(value: string): void;
  /** `/demo` typed in the chat: list the scripted model's scenarios (models.ts). */
  onDemo?(): void;
  /** The shown conversation's agent changed (its models are that agent's). */
  onAgent?(): void;
  /** Where each conversation's mode, footers and approval cards are kept for a reopen. */
  memory?: ConversationMemory;
  /** The conversation shown last, for a reloaded window (lastConversation.ts). */
  last: LastConversation;
}

export class Chat implements vscode.WebviewViewProvider, vscode.TextDocumentContentProvider, vscode.Disposable {
  static readonly viewId = 'piBridge.chat';

  private readonly conversations: Conversations;
  private readonly checkpoints: Checkpoints;
  private view: vscode.WebviewView | undefined;
  private ready = false;
  private readonly disposables: vscode.Disposable[] = [];
  /** Before-texts served for diffs, by URI query (kept for the window's life, like the thread). */
  private readonly before = new Map<string, string>();
  /** The header's model picker as last shown (sent again to a reloaded webview). */
  private models: HostToView['models'] | undefined;
  /** The agents the running bridge lists (its `initialize` answer; empty before it answered). */
  private agentList: AgentList = { agents: [], defaultAgent: null };
  private readonly mentions = new Mentions();

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly deps: ChatDeps,
  ) {
    this.conversations = new Conversations({
      session: () => this.deps.session(),
      runParams: (prompt, runId) => this.deps.runParams(prompt, runId),
      post: (message) => this.post(message),
      onChange: () => {
        this.showTitle();
        this.deps.onChange();
      },
      onApprovals: () => this.showWaiting(),
      onTitle: () => this.showTitle(),
      cwd: () => this.deps.cwd(),
      defaultAgent: () => this.agentList.defaultAgent,
      log: (message) => this.deps.log.warn(message),
      memory: this.deps.memory,
    });
    this.checkpoints = new Checkpoints({
      session: () => this.deps.session(),
      cwd: () => this.deps.cwd(),
      conversation: () => this.conversation,
      continueIn: (sessionId, prompt) => this.continueIn(sessionId, prompt),
      log: this.deps.log,
    });
    this.disposables.push(
      this.checkpoints,
      vscode.window.registerWebviewViewProvider(Chat.viewId, this),
      vscode.workspace.registerTextDocumentContentProvider(BEFORE_SCHEME, this),
      vscode.commands.registerCommand('piBridge.newConversation', () => this.newConversation()),
      vscode.commands.registerCommand('piBridge.openConversation', () => this.openConversation()),
      vscode.commands.registerCommand('piBridge.reviewChanges', () => this.reviewChanges()),
      vscode.commands.registerCommand('piBridge.toggleQueue', () =>
        this.conversation.setQueueMode(!this.conversation.queueMode),
      ),
      vscode.commands.registerCommand('piBridge.pickMode', () => this.pickMode()),
      vscode.commands.registerCommand('piBridge.managePermissions', () => this.manageRules()),
      vscode.commands.registerCommand('piBridge.send', (text: unknown) =>
        typeof text === 'string' ? this.conversation.send(text) : undefined,
      ),
    );
  }

  /** Put `text` in the chat's input, for the user to edit and send. */
  fill(text: string): void {
    this.post({ type: 'fill', payload: { text } });
  }

  /** Send `text` as the user's next message in the shown conversation. */
  sendPrompt(text: string): Promise<void> {
    return this.conversation.send(text);
  }

  /** The conversation the view shows. */
  get conversation(): Conversation {
    return this.conversations.current;
  }

  /** The shown conversation's latest context usage and cost. */
  get usage(): ConversationUsage {
    return this.conversation.lastUsage;
  }

  /** How many runs go, in every conversation of this window. */
  get running(): number {
    return this.conversations.runningCount;
  }

  /** Tool calls waiting for the user's decision, in every conversation of this window. */
  get pendingApprovals(): number {
    return this.conversations.pendingApprovals;
  }

  /**
   * The server->client request pi/requestPermission: a card in the chat of the run's conversation,
   * answered by its buttons; the bridge's $/cancelRequest (`token`) turns it to "cancelled".
   */
  requestPermission(params: RequestPermissionParams, token: CancellationToken): Promise<RequestPermissionAnswer> {
    return this.conversations.requestPermission(params, token);
  }

  /** The view's badge counts the waiting approvals while it is hidden; the status bar says so too. */
  private showWaiting(): void {
    const waiting = this.pendingApprovals;
    if (this.view) {
      // A badge of 0 shows nothing: VS Code 1.100's view pane ignores `undefined` once a badge is set.
      this.view.badge =
        waiting > 0 && !this.view.visible
          ? { value: waiting, tooltip: `${waiting} tool call(s) wait for your approval` }
          : { value: 0, tooltip: '' };
    }
    this.deps.onChange();
  }

  /** The view's title bar names the shown conversation ("CHAT: <title>"). */
  private showTitle(): void {
    if (this.view) {
      this.view.description = this.conversation.title ?? undefined;
    }
  }

  /** Stop the run that started last (pi: Cancel Current Run); false when none goes. */
  stopNewest(): boolean {
    return this.conversations.stopNewest();
  }

  /**
   * The conversation a one-shot prompt (pi: Ask…) becomes the first turn of, shown in the view
   * without taking the focus from where the user was.
   */
  async oneShot(): Promise<Conversation> {
    const conversation = this.conversations.forOneShot();
    await this.reveal(false);
    conversation.replay();
    return conversation;
  }

  // ------------------------------------------------------------------ webview

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    this.ready = false;
    const roots = [vscode.Uri.joinPath(this.extensionUri, 'media'), vscode.Uri.joinPath(this.extensionUri, 'dist')];
    view.webview.options = { enableScripts: true, localResourceRoots: roots };
    view.webview.html = this.html(view.webview);
    this.showTitle();
    this.disposables.push(
      view.webview.onDidReceiveMessage((msg: ViewMessage) => this.onViewMessage(msg)),
      view.onDidDispose(() => {
        this.view = undefined;
        this.ready = false;
      }),
      view.onDidChangeVisibility(() => this.showWaiting()),
    );
  }

  /** Show the agent's models and the next prompt's model in the header's picker. */
  showModels(models: HostToView['models']): void {
    this.models = models;
    this.post({ type: 'models', payload: models });
  }

  /** Whether the shown conversation runs the bridge's default agent (its pick is none, or that one). */
  get onDefaultAgent(): boolean {
    return this.conversation.onDefaultAgent;
  }

  /** The agents of a bridge that just answered `initialize`, for the header's agent picker. */
  setAgents(list: AgentList): void {
    this.agentList = list;
    this.showAgents();
  }

  /** Show the bridge's agents and the shown conversation's in the header's agent picker. */
  private showAgents(): void {
    this.post({ type: 'agents', payload: agentChoices(this.agentList, this.conversation.agent) });
  }

  /**
   * The header's agent picker: the shown conversation runs `name` from its next prompt. One that
   * has turns cannot change its agent: a new conversation on `name` takes its place.
   */
  async pickAgent(name: string): Promise<void> {
    const why = pickable(this.agentList, name);
    if (why) {
      this.showAgents(); // the picker goes back to the conversation's agent
      void vscode.window.showWarningMessage(`pi: agent ${name} cannot be picked: ${why}`);
      return;
    }
    if (agentOf(this.agentList, this.conversation.agent) === name) {
      return; // its agent already
    }
    const picked = name === this.agentList.defaultAgent ? null : name;
    if (!this.conversation.setAgent(picked)) {
      const next = this.conversations.replace();
      await this.reveal(true);
      next.setAgent(picked);
      next.replay();
    }
    this.post({ type: 'announce', payload: { text: `agent: ${name}` } });
    this.deps.onAgent?.();
  }

  private post(message: HostMessage): void {
    if (message.type === 'commands') {
      message = { type: 'commands', payload: { commands: withDemo(message.payload.commands) } };
    }
    if (message.type === 'reset' || message.type === 'session') {
      this.deps.last.set(message.payload.sessionId);
    }
    if (this.view && this.ready) {
      void this.view.webview.postMessage(message);
    }
    if (message.type === 'reset') {
      this.showAgents(); // another conversation, or the same one again: its agent
    }
  }

  async reveal(focusInput = false): Promise<void> {
    if (this.view) {
      this.view.show(!focusInput);
    } else {
      await vscode.commands.executeCommand(`${Chat.viewId}.focus`, { preserveFocus: !focusInput });
    }
  }

  private onViewMessage(msg: ViewMessage): void {
    switch (msg.type) {
      case 'ready':
        this.ready = true;
        void this.restore(msg.payload.sessionId);
        if (this.models) {
          this.post({ type: 'models', payload: this.models });
        }
        break;
      case 'send':
        void this.sendWithMentions(msg.payload.text, msg.payload.queue, msg.payload.images ?? []);
        break;
      case 'mentionQuery':
        void this.mentions.complete(msg.payload.query).then(
          (items) => this.post({ type: 'mentions', payload: { query: msg.payload.query, items } }),
          (err: unknown) => this.deps.log.warn(`@-mention completion: ${String(err)}`),
        );
        break;
      case 'stop':
        void this.conversation.stop();
        break;
      case 'setQueueMode':
        this.conversation.setQueueMode(msg.payload.queueMode);
        break;
      case 'removeChip':
        this.conversation.removeChip(msg.payload.id);
        break;
      case 'removeQueued':
        this.conversation.removeQueued(msg.payload.index);
        break;
      case 'openDiff':
        void this.openDiff(msg.payload.turnId, msg.payload.toolCallId);
        break;
      case 'openFile':
        void this.openFile(msg.payload.path, msg.payload.line);
        break;
      case 'answerApproval':
        this.conversation.answerApproval(msg.payload.key, msg.payload.optionId, msg.payload.message);
        break;
      case 'openApprovalDiff':
        void this.openApprovalDiff(msg.payload.key);
        break;
      case 'setMode':
        void this.conversation.setMode(msg.payload.mode);
        break;
      case 'restoreCheckpoint':
        void this.checkpoints.restore(msg.payload.turnId);
        break;
      case 'setup':
        this.deps.onSetup(msg.payload.action);
        break;
      case 'pickModel':
        this.deps.onPickModel(msg.payload.value);
        break;
      case 'pickAgent':
        void this.pickAgent(msg.payload.name);
        break;
      default: {
        const unknown: never = msg;
        void unknown;
      }
    }
  }

  /** Send a message whose @-mentions (files, folders, the selection) go with it as context chips. */
  private async sendWithMentions(text: string, queue: boolean, images: PromptImage[]): Promise<void> {
    if (isDemo(text)) {
      this.deps.onDemo?.();
      return;
    }
    const conversation = this.conversation;
    if (!conversation.running) {
      for (const context of await this.mentions.resolve(text)) {
        conversation.addChip(context);
      }
    }
    await conversation.send(text, queue, images);
  }

  /** A fresh webview: show this window's conversation, or after a reload the one its state kept. */
  private async restore(viewKept: string | null): Promise<void> {
    const conversation = this.conversation;
    const kept = this.deps.last.get();
    const sessionId = kept === undefined ? viewKept : kept;
    if (sessionId && conversation.sessionId === null && !conversation.running && conversation.isEmpty) {
      try {
        if (await conversation.open(sessionId)) {
          return;
        }
      } catch (err) {
        this.deps.log.warn(`could not restore conversation ${sessionId}: ${String(err)}`);
      }
    }
    conversation.replay();
  }

  private html(webview: vscode.Webview): string {
    return chatPage({
      cspSource: webview.cspSource,
      nonce: randomUUID().replace(/-/g, ''),
      styleUri: webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'media', 'chat.css')).toString(),
      scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview.js')).toString(),
    });
  }

  /** After a conversation rewind: the chat shows session `sessionId`, the rewound prompt in its input. */
  private async continueIn(sessionId: string, prompt: string): Promise<void> {
    await this.reveal(true);
    if (!(await this.conversations.open(sessionId))) {
      throw new Error(`the rewound conversation ${sessionId} was not found`);
    }
    this.post({ type: 'fill', payload: { text: prompt } });
  }

  // ------------------------------------------------------------------ commands

  async newConversation(): Promise<void> {
    const conversation = this.conversations.replace();
    await this.reveal(true);
    conversation.replay();
  }

  /**
   * pi: Open Conversation…: the workspace's conversations, newest first; a row's buttons rename
   * it (pi/renameSession) or delete it (pi/deleteSession, after a modal confirm), and the list
   * comes back after either.
   */
  async openConversation(): Promise<void> {
    let sessions: SessionsResult;
    try {
      const session = await this.deps.session();
      const cwd = this.deps.cwd();
      sessions = await session.request<SessionsResult>(Methods.sessions, cwd ? { cwd } : {});
    } catch (err) {
      void vscode.window.showErrorMessage(`pi: could not list conversations: ${String(err)}`);
      return;
    }
    const now = Date.now();
    const rename: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('edit'), tooltip: 'Rename' };
    const remove: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('trash'), tooltip: 'Delete' };
    type Item = vscode.QuickPickItem & { summary: SessionSummary };
    const pick = vscode.window.createQuickPick<Item>();
    pick.title = 'Open Conversation';
    pick.placeholder = 'Pick a pi conversation of this workspace (the buttons rename or delete it)';
    pick.matchOnDetail = true;
    pick.items = sessions.sessions.map((s) => ({
      label: s.title || '(untitled)',
      description: relativeTime(s.updatedAt, now),
      detail: `${s.messageCount} messages · ${new Date(s.updatedAt).toLocaleString()}`,
      buttons: [rename, remove],
      summary: s,
    }));
    const choice = await new Promise<{ item: Item; action: 'open' | 'rename' | 'delete' } | undefined>((resolve) => {
      pick.onDidAccept(() => {
        const item = pick.selectedItems[0];
        resolve(item ? { item, action: 'open' } : undefined);
        pick.hide();
      });
      pick.onDidTriggerItemButton((e) => {
        resolve({ item: e.item, action: e.button === rename ? 'rename' : 'delete' });
        pick.hide();
      });
      pick.onDidHide(() => resolve(undefined));
      pick.show();
    });
    pick.dispose();
    if (!choice) {
      return;
    }
    if (choice.action === 'rename') {
      await this.renameConversation(choice.item.summary);
      return this.openConversation();
    }
    if (choice.action === 'delete') {
      await this.deleteConversation(choice.item.summary);
      return this.openConversation();
    }
    await this.reveal(true);
    if (!(await this.conversations.open(choice.item.summary.sessionId))) {
      void vscode.window.showErrorMessage(`pi: conversation ${choice.item.summary.sessionId} was not found`);
    }
  }

  /** Ask for a new title of session `s` and give it (the chat's title follows if it is shown). */
  private async renameConversation(s: SessionSummary): Promise<void> {
    const title = await vscode.window.showInputBox({
      title: 'Rename Conversation',
      prompt: 'The new title of this pi conversation',
      value: s.title ?? '',
      validateInput: (value) => (value.trim() ? undefined : 'A title cannot be empty'),
    });
    if (title === undefined || !title.trim()) {
      return;
    }
    try {
      const session = await this.deps.session();
      const answer = await session.request<RenameSessionResult>(Methods.renameSession, {
        sessionId: s.sessionId,
        title: title.trim(),
      });
      this.conversations.find(s.sessionId)?.setTitle(answer.title);
    } catch (err) {
      void vscode.window.showErrorMessage(`pi: could not rename the conversation: ${String(err)}`);
    }
  }

  /** Delete session `s` once the user confirms; a chat that showed it starts a new conversation. */
  private async deleteConversation(s: SessionSummary): Promise<void> {
    const confirmed = await vscode.window.showWarningMessage(
      `Delete the pi conversation "${s.title || '(untitled)'}"?`,
      { modal: true, detail: 'Its session file is removed; this cannot be undone.' },
      'Delete',
    );
    if (confirmed !== 'Delete') {
      return;
    }
    try {
      const session = await this.deps.session();
      const answer = await session.request<DeleteSessionResult>(Methods.deleteSession, { sessionId: s.sessionId });
      if (!answer.deleted) {
        void vscode.window.showWarningMessage('pi: the bridge did not delete that conversation.');
        return;
      }
      this.conversations.forget(s.sessionId);
    } catch (err) {
      void vscode.window.showErrorMessage(`pi: could not delete the conversation: ${String(err)}`);
    }
  }

  /** Add the editor's selection (or the given/active file) as a context chip of the next prompt. */
  async addContext(kind: 'selection' | 'file', uri?: vscode.Uri): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (kind === 'selection') {
      if (!editor || editor.selection.isEmpty) {
        void vscode.window.showInformationMessage('pi: select some text first.');
        return;
      }
      const doc = editor.document;
      const sel = editor.selection;
      this.conversation.addChip({
        kind: 'selection',
        path: vscode.workspace.asRelativePath(doc.uri),
        languageId: doc.languageId,
        startLine: sel.start.line + 1,
        endLine: sel.end.line + 1,
        text: doc.getText(sel),
      });
    } else {
      const target = uri ?? editor?.document.uri;
      if (!target) {
        void vscode.window.showInformationMessage('pi: open a file first.');
        return;
      }
      const doc = await vscode.workspace.openTextDocument(target);
      this.conversation.addChip({
        kind: 'file',
        path: vscode.workspace.asRelativePath(target),
        languageId: doc.languageId,
        text: doc.getText(),
      });
    }
    await this.reveal(true);
  }

  private beforeUri(filePath: string, text: string | null | undefined, key: string): vscode.Uri {
    this.before.set(key, text ?? '');
    return vscode.Uri.from({ scheme: BEFORE_SCHEME, path: filePath, query: key });
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.before.get(uri.query) ?? '';
  }

  async openDiff(turnId: string, toolCallId: string): Promise<void> {
    const diff = this.conversation.diff(turnId, toolCallId);
    if (!diff) {
      void vscode.window.showInformationMessage('pi: this edit has no diff (it is from an earlier session).');
      return;
    }
    if (diff.oldText === undefined) {
      void vscode.window.showInformationMessage(`pi: the text of ${diff.path} before this edit was not captured.`);
      return;
    }
    const file = vscode.Uri.file(diff.path);
    const before = this.beforeUri(diff.path, diff.oldText, `${turnId}/${toolCallId}`);
    await vscode.commands.executeCommand('vscode.diff', before, file, `${path.basename(diff.path)} (pi)`, {
      preserveFocus: true,
      selection: new vscode.Range((diff.line ?? 1) - 1, 0, (diff.line ?? 1) - 1, 0),
    });
  }

  /** Open Diff on an approval card: the file now next to what the edit would make of it. */
  async openApprovalDiff(key: string): Promise<void> {
    const diff = this.conversation.proposedDiff(key);
    if (!diff || typeof diff.newText !== 'string') {
      void vscode.window.showInformationMessage('pi: this request has no proposed text to compare.');
      return;
    }
    const before = this.beforeUri(diff.path, diff.oldText, `${key}/before`);
    const after = this.beforeUri(diff.path, diff.newText, `${key}/after`);
    await vscode.commands.executeCommand('vscode.diff', before, after, `${path.basename(diff.path)} (proposed by pi)`, {
      preserveFocus: true,
      preview: true,
    });
  }

  async openFile(filePath: string, line: number): Promise<void> {
    const position = new vscode.Position(Math.max(0, line - 1), 0);
    await vscode.window.showTextDocument(vscode.Uri.file(filePath), {
      selection: new vscode.Range(position, position),
      preserveFocus: true,
    });
  }

  async reviewChanges(): Promise<void> {
    const run = this.conversation.runChanges();
    if (!run) {
      void vscode.window.showInformationMessage('pi: no run of this conversation changed a file.');
      return;
    }
    const triples = run.changes.map((change) => {
      const file = vscode.Uri.file(change.path);
      return [file, this.beforeUri(change.path, change.oldText, `${run.turnId}/run/${change.path}`), file];
    });
    await vscode.commands.executeCommand('vscode.changes', 'pi: changes of this run', triples);
  }

  /** The shown conversation's permission mode, picked (status bar item, Command Palette). */
  async pickMode(): Promise<void> {
    const conversation = this.conversation;
    const picked = await vscode.window.showQuickPick(
      MODES.map((mode) => ({
        label: mode,
        description: mode === conversation.mode ? `${MODE_DESCRIPTIONS[mode]} (current)` : MODE_DESCRIPTIONS[mode],
        mode,
      })),
      { title: 'pi: permission mode of this conversation (from its next tool call)' },
    );
    if (picked) {
      await conversation.setMode(picked.mode);
    }
  }

  /** pi: Manage Permission Rules: the workspace's saved rules; the ones picked are removed. */
  async manageRules(): Promise<void> {
    const cwd = this.deps.cwd();
    if (!cwd) {
      void vscode.window.showInformationMessage('pi: open a folder first; rules are saved per workspace.');
      return;
    }
    let current: PermissionsResult;
    try {
      current = await (await this.deps.session()).request<PermissionsResult>(Methods.permissions, { cwd });
    } catch (err) {
      void vscode.window.showErrorMessage(`pi: could not read the permission rules: ${String(err)}`);
      return;
    }
    if (current.rules.length === 0) {
      void vscode.window.showInformationMessage('pi: no permission rules saved for this workspace.');
      return;
    }
    const picked = await vscode.window.showQuickPick(
      current.rules.map((rule) => ({ label: ruleLabel(rule), description: rule.scope, detail: rule.id, rule })),
      {
        title: 'pi: permission rules of this workspace',
        placeHolder: 'Select the rules to remove, then press Enter',
        canPickMany: true,
        matchOnDetail: true,
      },
    );
    if (!picked || picked.length === 0) {
      return;
    }
    const removed = new Set(picked.map((p) => p.rule.id));
    try {
      const after = await (await this.deps.session()).request<PermissionsResult>(Methods.setPermissions, {
        cwd,
        rules: current.rules.filter((rule) => !removed.has(rule.id)),
      });
      void vscode.window.showInformationMessage(
        `pi: removed ${removed.size} rule(s); ${after.rules.length} left in this workspace.`,
      );
    } catch (err) {
      void vscode.window.showErrorMessage(`pi: could not save the permission rules: ${String(err)}`);
    }
  }

  dispose(): void {
    this.mentions.dispose();
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}

/** Where a setting lives: the workspace if it is set there, else the user settings. */
export function targetOf(config: vscode.WorkspaceConfiguration, key: string): vscode.ConfigurationTarget {
  return config.inspect(key)?.workspaceValue !== undefined
    ? vscode.ConfigurationTarget.Workspace
    : vscode.ConfigurationTarget.Global;
}
