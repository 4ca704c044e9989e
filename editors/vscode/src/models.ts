/**
 * One model picker, fed by the agent's own list (`pi/models`): the Command Palette's pi: Pick
 * Model…, the status bar's click and the chat header's dropdown all pick from it. A pick sets
 * piBridge.pi.provider and piBridge.pi.model, which the next prompt names; the thinking level is
 * the picker's last entry. The status bar and the header show the model the next prompt runs: the
 * settings' pick, else the one the agent runs now.
 */
import * as vscode from 'vscode';
import { demoExample, demoPrompt, demoScenarios } from './chat/demo';
import { THINKING_LEVELS } from './bridge/config';
import { Methods, type ModelInfo, type ModelsResult } from './bridge/protocol';
import type { Session } from './bridge/session';
import type { HostToView } from './chat/chatProtocol';

export interface ModelsDeps {
  session(): Promise<Session>;
  /** The shown conversation's session id, if it has one. */
  sessionId(): string | null;
  /**
   * Whether the shown conversation runs the bridge's default agent. pi/models takes no agent:
   * without a session it opens the default agent, and another agent's list it may not know.
   */
  onDefaultAgent(): boolean;
  /** The bridge opened a conversation to answer (none was named): the chat's next prompt goes there. */
  adopt(sessionId: string): void;
  cwd(): string | undefined;
  show(models: HostToView['models']): void;
  log: vscode.LogOutputChannel;
}

/** `provider/id` of a model. */
export function modelValue(model: Pick<ModelInfo, 'provider' | 'id'>): string {
  return model.provider ? `${model.provider}/${model.id}` : model.id;
}

export class Models {
  private listed: ModelInfo[] = [];
  /** The model the agent runs now, as its last answer said. */
  private agentCurrent: string | null = null;

  constructor(private readonly deps: ModelsDeps) {}

  /** The model the next prompt runs: the settings' pick, else the agent's current one. */
  get current(): string | null {
    const config = vscode.workspace.getConfiguration('piBridge');
    const provider = config.get<string>('pi.provider')?.trim() ?? '';
    const model = config.get<string>('pi.model')?.trim() ?? '';
    if (model) {
      return provider ? `${provider}/${model}` : model;
    }
    return this.agentCurrent;
  }

  /** The conversation the list was last asked of (undefined: not asked since the bridge started). */
  private askedFor: string | null | undefined;

  /** The bridge (re)started: its agent's list is asked again once a conversation has a session. */
  forget(): void {
    this.askedFor = undefined;
    this.defaultList = undefined;
  }

  /**
   * Ask again when the shown conversation has a session the list was not asked of (a run ended,
   * another conversation is shown). A conversation without one is left alone: asking would open
   * an agent for it beside the one its `/` commands opened.
   */
  refreshIfMoved(): void {
    const sessionId = this.deps.sessionId();
    if (sessionId && sessionId !== this.askedFor) {
      void this.refresh();
    }
  }

  /** Ask the agent for its models again (the picker, a run's end, another conversation). */
  async refresh(): Promise<void> {
    try {
      const session = await this.deps.session();
      const sessionId = this.deps.sessionId();
      this.askedFor = sessionId;
      if (!sessionId && !this.deps.onDefaultAgent()) {
        this.forgetList();
        return;
      }
      const cwd = this.deps.cwd();
      const params = sessionId ? { sessionId } : cwd ? { cwd } : {};
      const result = await session.request<ModelsResult>(Methods.models, params);
      if (!sessionId && result.sessionId) {
        this.deps.adopt(result.sessionId);
      }
      this.listed = result.models;
      this.agentCurrent = result.current ? modelValue(result.current) : null;
      if (this.deps.onDefaultAgent()) {
        this.defaultList = { listed: this.listed, current: this.agentCurrent };
      }
    } catch (err) {
      this.deps.log.warn(`could not list the agent's models: ${err instanceof Error ? err.message : String(err)}`);
      if (!this.deps.onDefaultAgent()) {
        this.forgetList(); // not another agent's list shown as this one's
        return;
      }
    }
    this.show();
  }

  /** The default agent's last list, shown again when a conversation goes back to that agent. */
  private defaultList: { listed: ModelInfo[]; current: string | null } | undefined;

  /**
   * The shown conversation picked another agent: the default agent's list comes back from memory
   * (asking would open a second conversation beside the one its `/` commands open), another
   * agent's is asked of its session, or waits for its first prompt.
   */
  agentChanged(): void {
    if (this.deps.onDefaultAgent() && this.defaultList) {
      this.listed = this.defaultList.listed;
      this.agentCurrent = this.defaultList.current;
      this.show();
    } else if (this.deps.sessionId() || this.deps.onDefaultAgent()) {
      void this.refresh();
    } else {
      this.forgetList();
    }
  }

  /** No list: the header shows the next prompt's model alone (the settings', or the agent's default). */
  private forgetList(): void {
    this.listed = [];
    this.agentCurrent = null;
    this.show();
  }

  /** Send the header's picker what it shows. */
  show(): void {
    this.deps.show({
      models: this.listed.map((m) => ({ value: modelValue(m), label: modelValue(m) })),
      current: this.current,
    });
  }

  /**
   * `/demo`: the scripted model's scenarios in a quick pick; the picked one becomes the model and
   * runs (or fills the input when it acts on the prompt's text). Without the scripted model, the
   * way to it.
   */
  async demo(chat: { fill(text: string): void; sendPrompt(text: string): Promise<void> }, useScripted: () => void): Promise<void> {
    await this.refresh();
    const scenarios = demoScenarios(this.listed);
    if (scenarios.length === 0) {
      const choice = await vscode.window.showInformationMessage(
        "/demo runs the bridge's scripted model (offline, no key), which is not running now.",
        'Try the scripted model',
      );
      if (choice) {
        useScripted();
      }
      return;
    }
    const picked = await vscode.window.showQuickPick(
      scenarios.map((s) => ({ label: s.id, detail: s.description, scenario: s })),
      { title: "pi: the scripted model's scenarios", placeHolder: 'Pick one to run', matchOnDetail: true },
    );
    if (!picked) {
      return;
    }
    await this.choose(picked.scenario.value);
    if (picked.scenario.needsPrompt) {
      chat.fill(demoExample(picked.scenario));
      return;
    }
    await chat.sendPrompt(demoPrompt(picked.scenario));
  }

  /** Make `value` (`provider/id`; '' for the agent's default) the next prompts' model. */
  async choose(value: string): Promise<void> {
    const config = vscode.workspace.getConfiguration('piBridge');
    const listed = this.listed.find((m) => modelValue(m) === value);
    const slash = value.indexOf('/');
    const provider = listed ? listed.provider : slash > 0 ? value.slice(0, slash) : '';
    const model = listed ? listed.id : slash > 0 ? value.slice(slash + 1) : value;
    await config.update('pi.provider', provider, targetOf(config, 'pi.provider'));
    await config.update('pi.model', model, targetOf(config, 'pi.model'));
    this.show();
  }

  /** pi: Pick Model…: the agent's models (the current one first), another by name, the thinking level. */
  async pick(): Promise<void> {
    const quickPick = vscode.window.createQuickPick<vscode.QuickPickItem & { value?: string; thinking?: true; other?: true }>();
    quickPick.title = 'pi: model of the next prompts';
    quickPick.placeholder = 'Type to filter the models the agent offers';
    quickPick.matchOnDescription = true;
    quickPick.busy = true;
    const items = (): (vscode.QuickPickItem & { value?: string; thinking?: true; other?: true })[] => {
      const current = this.current;
      const config = vscode.workspace.getConfiguration('piBridge');
      const models = this.listed.map((m) => ({
        label: modelValue(m),
        description: [m.name, modelValue(m) === current ? '(current)' : ''].filter(Boolean).join(' '),
        value: modelValue(m),
      }));
      models.sort((a, b) => Number(b.value === current) - Number(a.value === current));
      return [
        ...models,
        { label: '', kind: vscode.QuickPickItemKind.Separator },
        { label: '$(edit) Another model…', description: 'type provider/model', other: true },
        { label: '$(lightbulb) Thinking level…', description: config.get<string>('pi.thinking') || 'default', thinking: true },
      ];
    };
    quickPick.items = items();
    quickPick.show();
    void this.refresh().then(() => {
      quickPick.items = items();
      quickPick.busy = false;
    });
    const picked = await new Promise<(vscode.QuickPickItem & { value?: string; thinking?: true; other?: true }) | undefined>((resolve) => {
      quickPick.onDidAccept(() => resolve(quickPick.selectedItems[0]));
      quickPick.onDidHide(() => resolve(undefined));
    });
    quickPick.dispose();
    if (!picked) {
      return;
    }
    if (picked.thinking) {
      await pickThinking();
    } else if (picked.other) {
      const value = await vscode.window.showInputBox({
        title: 'pi model',
        prompt: 'provider/model (or a model id) for the next prompts; empty: the agent default',
        value: this.current ?? '',
        ignoreFocusOut: true,
      });
      if (value !== undefined) {
        await this.choose(value.trim());
      }
    } else if (picked.value) {
      await this.choose(picked.value);
    }
  }
}

async function pickThinking(): Promise<void> {
  const config = vscode.workspace.getConfiguration('piBridge');
  const level = await vscode.window.showQuickPick(
    [{ label: 'default', value: '' }, ...THINKING_LEVELS.map((l) => ({ label: l, value: l }))],
    { title: 'pi thinking level' },
  );
  if (level) {
    await config.update('pi.thinking', level.value, targetOf(config, 'pi.thinking'));
  }
}

function targetOf(config: vscode.WorkspaceConfiguration, key: string): vscode.ConfigurationTarget {
  return config.inspect(key)?.workspaceValue !== undefined
    ? vscode.ConfigurationTarget.Workspace
    : vscode.ConfigurationTarget.Global;
}
