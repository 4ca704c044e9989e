/**
 * The first run without a provider: the chat's setup card's three ways out. A provider's key is
 * kept in VS Code's SecretStorage and handed to the bridge's agents through
 * `initializationOptions.env` (never a setting, never the bridge's command line); "try the
 * scripted model" starts the bridge with its built-in offline model (PI_BRIDGE_SCRIPTED_MODEL=1).
 * Either choice restarts the bridge; the doctor opens its report.
 */
import * as vscode from 'vscode';
import type { SetupAction } from './chat/chatProtocol';

/** pi's providers a new user most likely has a key for, and the variable pi reads it from. */
export const PROVIDERS: { provider: string; label: string; variable: string }[] = [
  { provider: 'anthropic', label: 'Anthropic (Claude)', variable: 'ANTHROPIC_API_KEY' },
  { provider: 'openai', label: 'OpenAI', variable: 'OPENAI_API_KEY' },
  { provider: 'google', label: 'Google (Gemini)', variable: 'GEMINI_API_KEY' },
  { provider: 'openrouter', label: 'OpenRouter', variable: 'OPENROUTER_API_KEY' },
  { provider: 'mistral', label: 'Mistral', variable: 'MISTRAL_API_KEY' },
  { provider: 'groq', label: 'Groq', variable: 'GROQ_API_KEY' },
  { provider: 'xai', label: 'xAI (Grok)', variable: 'XAI_API_KEY' },
  { provider: 'deepseek', label: 'DeepSeek', variable: 'DEEPSEEK_API_KEY' },
];

const SCRIPTED_STATE = 'piBridge.scriptedModel';
const KEY_STATE = 'piBridge.keyVariable';
const SECRET_PREFIX = 'piBridge.key.';

/** What the bridge's start takes from the first-run choices. */
export interface FirstRunLaunch {
  /** Added to the bridge process's environment. */
  env: Record<string, string>;
  /** Added to `initializationOptions.env`: what the bridge hands its agents. */
  agentEnv: Record<string, string>;
}

export class FirstRun {
  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly restart: () => Promise<void>,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  /** Whether the user chose the scripted model (until they set a key). */
  get scripted(): boolean {
    return this.context.globalState.get<boolean>(SCRIPTED_STATE) === true;
  }

  /** The environment the first-run choices add to the bridge's start. */
  async launch(): Promise<FirstRunLaunch> {
    const env: Record<string, string> = {};
    const agentEnv: Record<string, string> = {};
    if (this.scripted) {
      env['PI_BRIDGE_SCRIPTED_MODEL'] = '1';
    }
    const variable = this.context.globalState.get<string>(KEY_STATE);
    if (variable) {
      const key = await this.context.secrets.get(SECRET_PREFIX + variable);
      if (key) {
        agentEnv[variable] = key;
      }
    }
    return { env, agentEnv };
  }

  /** Do a setup card's button. */
  async run(action: SetupAction): Promise<void> {
    if (action === 'doctor') {
      await vscode.commands.executeCommand('piBridge.checkInstallation');
    } else if (action === 'scripted') {
      await this.context.globalState.update(SCRIPTED_STATE, true);
      this.log.info('first run: the scripted model (offline, no key) from now on');
      await this.restart();
      void vscode.window.showInformationMessage(
        'pi: the built-in scripted model answers now (offline, no key). Send a prompt to try it; set a provider and key when you want a real model.',
      );
    } else {
      await this.setKey();
    }
  }

  /**
   * pi: Forget the First-Run Setup: the scripted model and the stored key are dropped (the key
   * from the secret storage too), and the bridge restarts on what the settings and pi's own
   * configuration give: the way back for a user who tried the scripted model and has set up a
   * provider since, or who wants to enter another key.
   */
  async forget(): Promise<void> {
    const variable = this.context.globalState.get<string>(KEY_STATE);
    if (variable) {
      await this.context.secrets.delete(SECRET_PREFIX + variable);
    }
    await this.context.globalState.update(KEY_STATE, undefined);
    await this.context.globalState.update(SCRIPTED_STATE, undefined);
    this.log.info('first run: the scripted model and the stored key are forgotten; restarting the bridge');
    await this.restart();
  }

  /** Pick a provider, take its key into SecretStorage, and restart the bridge with it. */
  private async setKey(): Promise<void> {
    const picked = await vscode.window.showQuickPick(
      [
        ...PROVIDERS.map((p) => ({ label: p.label, description: p.variable, variable: p.variable, provider: p.provider })),
        { label: 'Another provider…', description: 'name its key variable', variable: '', provider: '' },
      ],
      { title: 'pi: provider of your API key', ignoreFocusOut: true },
    );
    if (!picked) {
      return;
    }
    const variable =
      picked.variable ||
      (await vscode.window.showInputBox({
        title: 'pi: the variable pi reads the key from',
        placeHolder: 'e.g. CEREBRAS_API_KEY',
        ignoreFocusOut: true,
        validateInput: (v) => (/^[A-Z][A-Z0-9_]*$/.test(v.trim()) ? undefined : 'An environment variable name, e.g. FOO_API_KEY'),
      }))?.trim();
    if (!variable) {
      return;
    }
    const key = await vscode.window.showInputBox({
      title: `pi: ${variable}`,
      prompt: "Kept in VS Code's secret storage; handed only to the bridge's agents.",
      password: true,
      ignoreFocusOut: true,
      validateInput: (v) => (v.trim() ? undefined : 'Paste the key'),
    });
    if (!key?.trim()) {
      return;
    }
    await this.context.secrets.store(SECRET_PREFIX + variable, key.trim());
    await this.context.globalState.update(KEY_STATE, variable);
    await this.context.globalState.update(SCRIPTED_STATE, false);
    if (picked.provider) {
      const config = vscode.workspace.getConfiguration('piBridge');
      if (!config.get<string>('pi.provider')) {
        await config.update('pi.provider', picked.provider, vscode.ConfigurationTarget.Global);
      }
    }
    this.log.info(`first run: ${variable} set (secret storage); restarting the bridge`);
    await this.restart();
    void vscode.window.showInformationMessage(`pi: ${variable} is set. Send your prompt again.`);
  }
}
