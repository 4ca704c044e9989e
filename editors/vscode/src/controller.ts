/**
 * The extension's behaviour in VS Code: owns the bridge's LanguageClient and the Session on it,
 * registers the commands, runs each one-shot prompt (pi: Ask…) as the first turn of a new chat
 * conversation under a cancellable progress notification whose Cancel reaches the bridge as
 * `$/cancelRequest`, and keeps the status bar items and context keys current.
 */
import * as vscode from 'vscode';
import {
  LanguageClient,
  RevealOutputChannelOn,
  State,
  type ClientCapabilities,
  type LanguageClientOptions,
  type ServerOptions,
  type StaticFeature,
} from 'vscode-languageclient/node';
import { Chat, targetOf } from './chat/view';
import { readSettings, RESTART_KEYS, runParams, SYNCED_DOCUMENTS, type Settings } from './bridge/config';
import { usageLabel, type ConversationMemory, type RememberedConversation } from './chat/conversation/conversation';
import { checkInstallation, resolveBridgeLaunch } from './bridge/install';
import { promptTitle } from './chat/prompts';
import {
  Methods,
  PROTOCOL_VERSION,
  SANDBOX_MODE_DESCRIPTIONS,
  SANDBOX_MODES,
  type RequestPermissionParams,
  type SandboxAvailability,
  type ServerCapabilities,
} from './bridge/protocol';
import { statusLine, type RunRecord } from './bridge/run';
import { sandboxStatus } from './bridge/sandbox';
import { Session } from './bridge/session';
import { FirstRun } from './firstRun';
import { LastConversation } from './chat/conversation/lastConversation';
import { Models } from './models';

const CLIENT_ID = 'piBridge';
const RUNNING_CONTEXT = 'piBridge.running';

/**
 * Declares in `initialize` that this client answers pi/requestPermission (contract, turn 3), so the
 * bridge asks in the chat's approval cards instead of a notification.
 */
const APPROVALS_FEATURE: StaticFeature = {
  fillClientCapabilities(capabilities: ClientCapabilities): void {
    const experimental = (capabilities.experimental ?? {}) as Record<string, unknown>;
    const ours = (experimental['piBridge'] ?? {}) as Record<string, unknown>;
    capabilities.experimental = { ...experimental, piBridge: { ...ours, permissions: true } };
  },
  initialize(): void {},
  getState: () => ({ kind: 'static' }),
  clear(): void {},
};

export class Controller implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private session: Session | undefined;
  private starting: Promise<Session> | undefined;
  /** The last restart asked for (restarts are serial: see restart()). */
  private restarting: Promise<void> = Promise.resolve();
  /** Restarts asked for and not yet ended: a session asked for meanwhile is the restarted bridge's. */
  private restartsPending = 0;
  /** The cancel of each one-shot run under way (its notification's, or a restart's). */
  private readonly oneShots = new Set<vscode.CancellationTokenSource>();
  private readonly log: vscode.LogOutputChannel;
  private readonly status: vscode.StatusBarItem;
  /** The shown conversation's permission mode (click: pick another), and approvals waiting. */
  private readonly modeStatus: vscode.StatusBarItem;
  /** The sandbox of the next runs' commands (click: pick another), warning when none can be had. */
  private readonly sandboxStatus: vscode.StatusBarItem;
  private readonly chat: Chat;
  /** The first run without a provider: the chat's setup card's ways out. */
  private readonly firstRun: FirstRun;
  /** The one model picker (status bar, Command Palette, the chat's header). */
  private readonly models: Models;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly context: vscode.ExtensionContext) {
    this.log = vscode.window.createOutputChannel('pi-bridge', { log: true });
    this.status = vscode.window.createStatusBarItem('piBridge.status', vscode.StatusBarAlignment.Right, 100);
    this.status.name = 'pi';
    this.status.command = 'piBridge.pickModel';
    this.modeStatus = vscode.window.createStatusBarItem('piBridge.mode', vscode.StatusBarAlignment.Right, 99);
    this.modeStatus.name = 'pi mode';
    this.modeStatus.command = 'piBridge.pickMode';
    // Just below the mode's priority: on the right, a lower priority sits immediately to its right.
    this.sandboxStatus = vscode.window.createStatusBarItem('piBridge.sandbox', vscode.StatusBarAlignment.Right, 98.9);
    this.sandboxStatus.name = 'pi sandbox';
    this.sandboxStatus.command = 'piBridge.pickSandbox';
    this.chat = new Chat(context.extensionUri, {
      session: () => this.ensureSession(),
      runParams: (prompt, runId) => runParams(this.settings(), prompt, runId, defaultCwd()),
      cwd: defaultCwd,
      log: this.log,
      onChange: () => {
        this.updateStatus();
        this.models.refreshIfMoved();
      },
      onSetup: (action) => void this.firstRun.run(action),
      onPickModel: (value) => void this.models.choose(value),
      onDemo: () => void this.models.demo(this.chat, () => void this.firstRun.run('scripted')),
      onAgent: () => this.models.agentChanged(),
      memory: workspaceMemory(context.workspaceState),
      last: new LastConversation(
        vscode.Uri.joinPath(context.storageUri ?? context.globalStorageUri, 'last-conversation.json').fsPath,
      ),
    });
    this.firstRun = new FirstRun(context, () => this.restart(), this.log);
    this.models = new Models({
      session: () => this.ensureSession(),
      sessionId: () => this.chat.conversation.sessionId,
      onDefaultAgent: () => this.chat.onDefaultAgent,
      agent: () => this.chat.conversation.toolboxAgent,
      adopt: (sessionId) => this.chat.conversation.offerSession(sessionId),
      cwd: defaultCwd,
      show: (models) => {
        this.chat.showModels(models);
        this.updateStatus();
      },
      log: this.log,
    });
    this.disposables.push(
      this.chat,
      this.log,
      this.status,
      this.modeStatus,
      this.sandboxStatus,
      vscode.commands.registerCommand('piBridge.ask', (prompt?: unknown) => this.ask(prompt)),
      // Context for the chat's next prompt (a one-shot pi: Ask… takes it along too).
      vscode.commands.registerCommand('piBridge.askSelection', () => this.chat.addContext('selection')),
      vscode.commands.registerCommand('piBridge.askFile', (uri?: unknown) =>
        this.chat.addContext('file', uri instanceof vscode.Uri ? uri : undefined),
      ),
      vscode.commands.registerCommand('piBridge.cancel', () => this.cancelCurrent()),
      // One picker; piBridge.setModel (its old free-text box) is kept as a name for it.
      vscode.commands.registerCommand('piBridge.pickModel', () => this.models.pick()),
      vscode.commands.registerCommand('piBridge.setModel', () => this.models.pick()),
      vscode.commands.registerCommand('piBridge.pickSandbox', () => this.pickSandbox()),
      vscode.commands.registerCommand('piBridge.showLog', () => this.log.show(true)),
      vscode.commands.registerCommand('piBridge.restart', () => this.restart()),
      vscode.commands.registerCommand('piBridge.forgetFirstRun', () => this.firstRun.forget()),
      vscode.commands.registerCommand('piBridge.checkInstallation', () => this.checkInstallation(true)),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)),
    );
    this.updateStatus();
    this.status.show();
    this.modeStatus.show();
    this.sandboxStatus.show();
    // A missing Python or pi is reported at activation, before the first prompt.
    void this.checkInstallation(false);
  }

  /** Ask the bridge's doctor (pi: Check Installation shows its report in the log). */
  private async checkInstallation(show: boolean): Promise<void> {
    try {
      await checkInstallation(await resolveBridgeLaunch(this.settings(), this.context.extensionPath, this.log), this.log);
    } catch {
      // resolveBridgeLaunch has told the user
    }
    if (show) {
      this.log.show(true);
    }
  }

  private settings(): Settings {
    const config = vscode.workspace.getConfiguration('piBridge');
    return readSettings((key) => config.get(key), (message) => this.log.warn(message));
  }

  // ------------------------------------------------------------------ bridge lifecycle

  /**
   * The session on a running bridge, starting the bridge on first use. While a restart is asked
   * for (a settings change, a stored key), it is the restarted bridge's: a prompt sent then must
   * not go to the bridge about to be stopped, which would end it with a dropped connection.
   */
  private async ensureSession(): Promise<Session> {
    while (this.restartsPending > 0) {
      await this.restarting;
    }
    return this.sessionNow();
  }

  /** The session on a running bridge now, starting one if none runs (a restart's own start). */
  private sessionNow(): Promise<Session> {
    if (this.session && this.client?.state === State.Running) {
      return Promise.resolve(this.session);
    }
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async start(): Promise<Session> {
    await this.stopClient();
    const launch = await resolveBridgeLaunch(this.settings(), this.context.extensionPath, this.log);
    void checkInstallation(launch, this.log);
    // The first-run choices: the scripted model, or a key from SecretStorage for the agents.
    const first = await this.firstRun.launch();
    const initializationOptions = { ...launch.initializationOptions };
    if (Object.keys(first.agentEnv).length > 0) {
      initializationOptions.env = { ...(initializationOptions.env ?? {}), ...first.agentEnv };
    }
    const serverOptions: ServerOptions = {
      command: launch.command,
      args: launch.args,
      options: { env: { ...launch.env, ...first.env } },
    };
    const clientOptions: LanguageClientOptions = {
      // Every file the user opens is synced (didOpen/didChange/didClose), so the bridge reads
      // what the user sees and sends an agent's write to a dirty file as `workspace/applyEdit`,
      // which vscode-languageclient applies to the buffer (it declares `workspace.applyEdit`).
      documentSelector: [...SYNCED_DOCUMENTS],
      initializationOptions,
      // The JSON-RPC trace goes to this channel at log level Trace (vscode-languageclient 10+).
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
    };
    this.log.info(`starting bridge: ${[launch.command, ...launch.args].join(' ')}`);
    const client = new LanguageClient(CLIENT_ID, 'pi-bridge', serverOptions, clientOptions);
    client.registerFeature(APPROVALS_FEATURE);
    client.onRequest(Methods.requestPermission, (params: RequestPermissionParams, token: vscode.CancellationToken) =>
      this.chat.requestPermission(params, token),
    );
    client.onDidChangeState((e) => {
      this.log.info(`bridge ${State[e.oldState]} -> ${State[e.newState]}`);
      this.updateStatus();
    });
    this.client = client;
    const session = new Session(client, (message) => this.log.warn(message));
    this.session = session;
    try {
      await client.start();
    } catch (err) {
      this.log.error(`bridge failed to start: ${String(err)}`);
      void this.offerHelp(
        `pi-bridge could not start with "${launch.command}". Check the piBridge.bridge.command setting.`,
      );
      throw err;
    }
    const info = client.initializeResult;
    const caps = (info?.capabilities.experimental as { piBridge?: ServerCapabilities } | undefined)?.piBridge;
    if (caps?.protocolVersion !== PROTOCOL_VERSION) {
      this.log.warn(
        `bridge speaks protocol ${String(caps?.protocolVersion)}, this extension ${PROTOCOL_VERSION}`,
      );
    }
    this.log.info(`bridge ready: ${info?.serverInfo?.name ?? '?'} ${info?.serverInfo?.version ?? ''}`);
    this.models.forget();
    this.chat.setAgents({ agents: caps?.agents ?? [], defaultAgent: caps?.defaultAgent ?? null });
    return session;
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.session?.dispose();
    this.session = undefined;
    this.client = undefined;
    if (client) {
      try {
        await client.dispose(5000);
      } catch (err) {
        this.log.warn(`stopping the bridge: ${String(err)}`);
      }
    }
  }

  /**
   * Restarts run one after another, each after any start under way has settled: disposing a
   * client that is still starting breaks it for good (a key stored from the chat restarts the
   * bridge while a settings change may be restarting it too).
   */
  private restart(): Promise<void> {
    this.restartsPending += 1;
    const next = this.restarting.then(() => this.restartNow()).finally(() => {
      this.restartsPending -= 1;
    });
    this.restarting = next.catch(() => undefined);
    return next;
  }

  private async restartNow(): Promise<void> {
    for (const cancel of this.oneShots) {
      cancel.cancel();
    }
    await this.starting?.catch(() => undefined);
    await this.stopClient();
    try {
      await this.sessionNow();
      void vscode.window.setStatusBarMessage('pi-bridge restarted', 3000);
    } catch {
      // start() has told the user.
    }
  }

  private onConfigurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (
      e.affectsConfiguration('piBridge.pi.model') ||
      e.affectsConfiguration('piBridge.pi.provider') ||
      e.affectsConfiguration('piBridge.pi.thinking') ||
      e.affectsConfiguration('piBridge.sandbox')
    ) {
      this.models.show();
      this.updateStatus();
    }
    // A start under way may have read the settings before this change: it is restarted too.
    if ((!this.client && !this.starting) || !RESTART_KEYS.some((key) => e.affectsConfiguration(key))) {
      return;
    }
    if (this.chat.running === 0) {
      void this.restart();
      return;
    }
    void vscode.window
      .showInformationMessage('pi-bridge settings changed. Restart the bridge now?', 'Restart')
      .then((choice) => (choice === 'Restart' ? this.restart() : undefined));
  }

  private async offerHelp(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, 'Open Settings', 'Show Log');
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'piBridge');
    } else if (choice === 'Show Log') {
      this.log.show(true);
    }
  }

  // ------------------------------------------------------------------ runs

  /**
   * Run `prompt` as a one-shot: the first turn of a new chat conversation (it sees no earlier
   * turns), with a cancellable progress notification, and a notification if it fails.
   */
  private async oneShot(prompt: string): Promise<RunRecord | undefined> {
    const title = promptTitle(prompt);
    const conversation = await this.chat.oneShot();
    const cancel = new vscode.CancellationTokenSource();
    this.oneShots.add(cancel);
    const record = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `pi: ${title}`, cancellable: true },
      async (progress, token) => {
        const link = token.onCancellationRequested(() => cancel.cancel());
        let lastLine = '';
        try {
          return await conversation.ask(prompt, {
            token: cancel.token,
            onUpdate: (r) => {
              const line = r.status === 'running' && cancel.token.isCancellationRequested ? 'cancelling…' : progressLine(r);
              if (line !== lastLine) {
                lastLine = line;
                progress.report({ message: line });
              }
            },
          });
        } finally {
          link.dispose();
          this.oneShots.delete(cancel);
          cancel.dispose();
        }
      },
    );
    if (!record) {
      return undefined; // the bridge did not start; start() has told the user
    }
    this.log.info(`run ${record.runId}: ${statusLine(record)}`);
    if (record.status === 'failed' || record.status === 'error') {
      void this.offerHelp(`pi: ${statusLine(record)}`);
    } else if (record.status === 'cancelled') {
      void vscode.window.setStatusBarMessage('pi: run cancelled', 5000);
    }
    return record;
  }

  private async ask(prompt?: unknown): Promise<RunRecord | undefined> {
    const text =
      typeof prompt === 'string' && prompt.trim()
        ? prompt
        : await vscode.window.showInputBox({
            title: 'Ask pi',
            prompt: 'What should pi do? A one-shot run: the first turn of a new conversation in the chat.',
            placeHolder: 'e.g. explain what this project does',
            ignoreFocusOut: true,
            validateInput: (value) => (value.trim() ? undefined : 'Type a prompt'),
          });
    if (!text?.trim()) {
      return undefined;
    }
    return this.oneShot(text);
  }

  /** Stop the run that started last, in whichever conversation (shown or not). */
  private cancelCurrent(): void {
    if (!this.chat.stopNewest()) {
      void vscode.window.setStatusBarMessage('pi: no run to cancel', 3000);
    }
  }

  /** The status bar's sandbox click: the mode, then (when it confines) the network, for the next runs. */
  private async pickSandbox(): Promise<void> {
    const config = vscode.workspace.getConfiguration('piBridge');
    const current = this.settings();
    const markCurrent = (yes: boolean, description: string): string => (yes ? `${description} (current)` : description);
    const picked = await vscode.window.showQuickPick(
      SANDBOX_MODES.map((mode) => ({
        label: mode,
        description: markCurrent(mode === current.sandboxMode, SANDBOX_MODE_DESCRIPTIONS[mode]),
        mode,
      })),
      { title: "pi: sandbox of the agent's commands (from the next prompt)" },
    );
    if (!picked) {
      return;
    }
    if (picked.mode !== 'off') {
      const network = await vscode.window.showQuickPick(
        [
          {
            label: '$(circle-slash) No network',
            description: markCurrent(!current.sandboxNetwork, 'no network at all, loopback included'),
            network: false,
          },
          {
            label: '$(globe) Network',
            description: markCurrent(current.sandboxNetwork, 'commands may reach the network'),
            network: true,
          },
        ],
        { title: `pi: network of the ${picked.mode} sandbox's commands` },
      );
      if (!network) {
        return;
      }
      await config.update('sandbox.network', network.network, targetOf(config, 'sandbox.network'));
    }
    await config.update('sandbox.mode', picked.mode, targetOf(config, 'sandbox.mode'));
  }

  /**
   * Whether the running bridge can sandbox, from its initialize answer; undefined while none runs
   * (the client drops that answer when it stops), so nothing is claimed before the first start.
   */
  private sandboxAvailability(): SandboxAvailability | undefined {
    const experimental = this.client?.initializeResult?.capabilities.experimental as
      | { piBridge?: ServerCapabilities }
      | undefined;
    return experimental?.piBridge?.sandbox ?? undefined;
  }

  private updateStatus(): void {
    const settings = this.settings();
    // The model the next prompt runs: the picked one, else the one the agent runs now.
    const current = this.models.current;
    const model = current ?? 'default model';
    const running = this.chat.running;
    const state = this.client ? State[this.client.state].toLowerCase() : 'not started';
    void vscode.commands.executeCommand('setContext', RUNNING_CONTEXT, running > 0);
    const thinking = settings.thinking ? ` · thinking: ${settings.thinking}` : '';
    const usage = usageLabel(this.chat.usage);
    this.status.text = `${running > 0 ? '$(sync~spin)' : '$(hubot)'} pi: ${model}${thinking}${usage ? ` · ${usage}` : ''}`;
    const window = this.chat.usage.contextUsage;
    const context = window
      ? ` Context: ${window.tokens ?? '?'} of ${window.contextWindow} tokens.`
      : '';
    this.status.tooltip = `pi-bridge: ${state}; ${running} run(s) live.${context} Click to pick the model (or the thinking level).`;
    this.status.accessibilityInformation = { label: `pi model: ${settings.model || current || 'default'}` };
    const mode = this.chat.conversation.mode;
    const waiting = this.chat.pendingApprovals;
    this.modeStatus.text = `$(shield) ${mode}${waiting > 0 ? ` · $(bell-dot) ${waiting} waiting` : ''}`;
    this.modeStatus.tooltip = `pi permission mode of this conversation: ${mode}.${
      waiting > 0 ? ` ${waiting} tool call(s) wait for your approval in the chat.` : ''
    } Click to pick another mode.`;
    this.modeStatus.accessibilityInformation = {
      label: `pi mode: ${mode}${waiting > 0 ? `, ${waiting} approval(s) waiting` : ''}`,
    };
    const sandbox = sandboxStatus(settings, this.sandboxAvailability());
    this.sandboxStatus.text = sandbox.text;
    this.sandboxStatus.tooltip = sandbox.tooltip;
    this.sandboxStatus.accessibilityInformation = { label: sandbox.label };
    this.sandboxStatus.backgroundColor = sandbox.unavailable
      ? new vscode.ThemeColor('statusBarItem.warningBackground')
      : undefined;
  }

  async dispose(): Promise<void> {
    for (const cancel of this.oneShots) {
      cancel.cancel();
    }
    await this.stopClient();
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}

function progressLine(record: RunRecord): string {
  const text = record.text.replace(/\s+/g, ' ').trim();
  if (record.status === 'running' && text) {
    return text.length > 60 ? `…${text.slice(-59)}` : text;
  }
  return statusLine(record);
}

function defaultCwd(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.[0];
  return folder?.uri.scheme === 'file' ? folder.uri.fsPath : undefined;
}

/** Conversations remembered in the workspace's state (a bounded number, the latest kept). */
function workspaceMemory(state: vscode.Memento): ConversationMemory {
  const KEY = 'piBridge.conversations';
  const MAX = 50;
  const all = (): Record<string, RememberedConversation> => state.get<Record<string, RememberedConversation>>(KEY) ?? {};
  return {
    get: (sessionId) => all()[sessionId],
    set: (sessionId, conversation) => {
      const kept = Object.entries(all()).filter(([id]) => id !== sessionId);
      void state.update(KEY, Object.fromEntries([...kept.slice(-(MAX - 1)), [sessionId, conversation]]));
    },
  };
}
