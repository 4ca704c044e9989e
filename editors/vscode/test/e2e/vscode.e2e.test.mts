/**
 * End to end in a real VS Code: code-server 4.100.3 (VS Code OSS 1.100.3, on Node 20) with the
 * platform .vsix installed into a clean user-data dir and a clean $HOME, no pi-bridge on PATH: the
 * extension runs its bundled bridge on python3 from PATH. The only settings point pi at the
 * scripted model, run by the test as its own process so it can read the requests that reached the
 * model. Runs one-shot prompts from the Command Palette (pi: Ask…) and sees each answer stream into
 * the chat as the first turn of a new conversation (thoughts, a tool card, the run's final state),
 * cancels a slow one from the progress notification; converses in the chat view (a context chip,
 * two turns, the status bar's context figure, a steer, Stop, Open Diff, reopening a conversation
 * after pi: Restart Bridge, a window reload), answers the approval cards of tool calls (Allow by
 * keyboard, Always allow and then pi: Manage Permission Rules to remove the rule, Deny with a
 * reason, a card withdrawn by Stop, a proposed edit's diff), picks the permission mode in the
 * status bar and the chat's header; then takes pi off the bridge's PATH and follows the
 * Install pi notification to a terminal running the npm command, then takes python3 away and sees
 * the notification that names what is missing. Issue 38 with live agents: pi's edit of a file left
 * dirty goes through the editor (the buffer, not the disk), and the real Claude Code's plan is pinned
 * above the composer with its subagent folded under the Task card. Screenshots go to
 * artifacts/vscode/ at the repo root.
 */
import assert from 'node:assert/strict';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import puppeteer, { type Browser, type ElementHandle, type Frame, type Page } from 'puppeteer-core';
import {
  bridgePython,
  isAlive,
  processesMatching,
  repoRoot,
  TEST_TAG_VAR,
  testTag,
  waitUntil,
  withTimeout,
} from '../harness.js';
import { restoreCheckpointFlow } from './checkpoints.e2e.mjs';

const extensionDir = resolve(fileURLToPath(new URL('.', import.meta.url)), '../../..');
const codeServerDir =
  process.env['CODE_SERVER_DIR'] ?? join(extensionDir, '.cache/code-server-4.100.3/node_modules/code-server');
const node20 = process.env['CODE_SERVER_NODE'] ?? '/usr/bin/node';
const chromium = process.env['CHROMIUM'] ?? '/usr/bin/chromium';
const vsix = process.env['PI_BRIDGE_VSIX'] ?? join(extensionDir, 'dist/pi-bridge-linux-x64.vsix');
const artifacts = join(repoRoot, 'artifacts/vscode');

const UI_TIMEOUT = 60_000;
const PI_PROCESS = /^(pi|sleep 30)(\s|$)/;

let tmp: string;
let failed = false;
let codeServer: ChildProcess;
let codeServerExit: Promise<number | null>;
let codeServerLog = '';
let scriptedModel: ChildProcess;
let scriptedModelUrl = '';
const SCRIPTED_REQUESTS_PATH = '/_scripted/requests';
const EDIT_ORIGINAL = 'line one\nline two\nline three\n';
let browser: Browser;
let page: Page;

let userPath: string;

/** The environment of code-server (and so of the extension and its bridge): nothing of the checkout. */
function userEnv(home: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const key of ['LANG', 'LC_ALL', 'TMPDIR', 'USER', 'LOGNAME', 'SHELL', 'TERM']) {
    if (process.env[key] !== undefined) {
      env[key] = process.env[key];
    }
  }
  return { ...env, HOME: home, PATH: userPath, PI_BRIDGE_SCRIPTED_MODEL: '1', [TEST_TAG_VAR]: testTag };
}

/** The extension's log (its LogOutputChannel's file under the user-data dir), '' before it exists. */
function extensionLog(): string {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        walk(path);
      } else if (/pi-bridge\.log$/.test(entry.name)) {
        found.push(path);
      }
    }
  };
  const logs = join(tmp, 'user-data/logs');
  if (existsSync(logs)) {
    walk(logs);
  }
  return found.map((path) => readFileSync(path, 'utf8')).join('\n');
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}

/** Run a UI step; on failure keep a screenshot of what the workbench showed. */
async function step<T>(name: string, body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    failed = true;
    await screenshot(`failed-${name}.png`).catch(() => undefined);
    // CI keeps only the output: say there what the chat showed and what the bridge logged.
    console.log(`--- ${name} failed; the chat showed:\n${await chatText()}`);
    console.log(`--- the extension's log (with the bridge's stderr), last lines:\n${extensionLog().split('\n').slice(-120).join('\n')}`);
    throw err;
  }
}

/** The text of the chat webview's thread, or why it could not be read. */
async function chatText(): Promise<string> {
  for (const frame of page.frames()) {
    try {
      const text = (await frame.evaluate(
        "document.getElementById('thread') ? document.getElementById('thread').innerText : null",
      )) as string | null;
      if (text !== null) {
        return text.slice(-4000);
      }
    } catch {
      // A frame that navigated away while we looked.
    }
  }
  return '(no chat view)';
}

async function screenshot(name: string): Promise<string> {
  mkdirSync(artifacts, { recursive: true });
  const path = join(artifacts, name);
  await page.screenshot({ path });
  return path;
}

/**
 * Open the Command Palette with F1 and return its input.
 *
 * A key pressed while a webview that holds the focus is being rebuilt (a new conversation, a
 * reload) never reaches the workbench: the palette is asked again, from the workbench's own
 * focus, and what held the focus is said if it still does not open.
 */
async function openCommandPalette(): Promise<ElementHandle<Element>> {
  const selector = '.quick-input-widget .quick-input-box input';
  const attempts = 3;
  for (let attempt = 1; ; attempt++) {
    await page.keyboard.press('F1');
    const input = await page
      .waitForSelector(selector, { visible: true, timeout: UI_TIMEOUT / attempts })
      .catch(() => null);
    if (input) return input;
    const focus = (await page.evaluate(
      `(() => { const a = document.activeElement; const d = document.querySelector('.monaco-dialog-box');
        return (a ? a.tagName + '.' + a.className : 'none') + (d ? ' · dialog: ' + d.textContent : ''); })()`,
    )) as string;
    console.log(`F1 opened no Command Palette (attempt ${attempt}); the focus was on ${focus}`);
    assert.ok(attempt < attempts, `F1 opened no Command Palette; the focus was on ${focus}`);
    await page.evaluate('document.activeElement && document.activeElement.blur()');
  }
}

/** Run a Command Palette command by its title. */
async function runCommand(title: string): Promise<void> {
  const input = await openCommandPalette();
  await input.type(title);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`, {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  await page.keyboard.press('Enter');
}

/** Answer the input box a command opened (title shown above it), replacing its value. */
async function answerInputBox(title: string, value: string): Promise<void> {
  await page.waitForSelector(`.quick-input-widget .quick-input-title::-p-text(${title})`, {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  const input = await page.waitForSelector('.quick-input-widget .quick-input-box input', { visible: true });
  assert.ok(input);
  await input.click({ count: 3 });
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyA');
  await page.keyboard.up('Control');
  await page.keyboard.press('Backspace');
  await input.type(value);
  await page.keyboard.press('Enter');
}

async function waitUntilAsync(condition: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

before(async () => {
  for (const [what, path] of [
    ['code-server', join(codeServerDir, 'out/node/entry.js')],
    ['chromium', chromium],
    ['the .vsix', vsix],
  ] as const) {
    assert.ok(existsSync(path), `${what} at ${path} (run ci.sh to install and build)`);
  }
  tmp = mkdtempSync(join(tmpdir(), 'pi-bridge-vscode-e2e-'));
  // The machine of a new user: Node 22 and pi, a python3 without the bridge, a stub npm that
  // records what it was asked to do, and the system's own directories; nothing else.
  const bin = join(tmp, 'bin');
  mkdirSync(bin);
  const tools = join(repoRoot, '.tools/node_modules/.bin');
  symlinkSync(join(tools, 'node'), join(bin, 'node'));
  symlinkSync(join(tools, 'pi'), join(bin, 'pi'));
  const basePython = execFileSync(bridgePython(), ['-c', 'import sys; print(sys._base_executable)'], {
    encoding: 'utf8',
  }).trim();
  symlinkSync(basePython, join(bin, 'python3'));
  writeFileSync(join(bin, 'npm'), `#!/bin/sh\necho "$@" >> ${join(tmp, 'npm-calls')}\n`, { mode: 0o755 });
  userPath = [bin, '/usr/bin', '/bin'].join(':');
  for (const dir of userPath.split(':')) {
    assert.ok(!existsSync(join(dir, 'pi-bridge')), `no pi-bridge on PATH (${dir})`);
  }
  const home = join(tmp, 'home');
  mkdirSync(home);
  // VS Code takes the extension host's environment from a login shell, whose /etc/profile resets
  // PATH: a user's ~/.profile is where Node and pi get onto it.
  writeFileSync(join(home, '.profile'), `export PATH="${bin}:$PATH"\n`);
  const userData = join(tmp, 'user-data');
  const extensions = join(tmp, 'extensions');
  const workspace = join(tmp, 'workspace');
  mkdirSync(join(userData, 'User'), { recursive: true });
  mkdirSync(workspace, { recursive: true });
  writeFileSync(join(workspace, 'hello.py'), 'print("hello")\n');
  writeFileSync(join(workspace, 'notes.txt'), EDIT_ORIGINAL);
  const agentDir = join(tmp, 'agent');
  scriptedModel = spawn(
    bridgePython(),
    ['-m', 'bridge.scripted_model', '--agent-dir', agentDir],
    { env: { ...process.env, PYTHONPATH: repoRoot }, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const firstLine = new Promise<string>((resolveLine) => {
    let out = '';
    scriptedModel.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) {
        resolveLine(out.split('\n')[0] ?? '');
      }
    });
  });
  const { baseUrl } = JSON.parse(await withTimeout(firstLine, 30_000, 'the scripted model to start')) as { baseUrl: string };
  scriptedModelUrl = baseUrl.replace(/\/v1$/, '');
  // pi compacts even the short sessions of the scripted model (it keeps no recent tokens out of
  // the summary), and a user's prompt template gives pi a command of its own: /review-notes.
  writeFileSync(join(agentDir, 'settings.json'), JSON.stringify({ compaction: { keepRecentTokens: 1 } }));
  mkdirSync(join(agentDir, 'prompts'), { recursive: true });
  writeFileSync(
    join(agentDir, 'prompts/review-notes.md'),
    '---\ndescription: Review the notes file\n---\nReview notes.txt and list what is missing.\n',
  );
  writeFileSync(join(tmp, 'config.yaml'), '');
  writeFileSync(
    join(userData, 'User/settings.json'),
    JSON.stringify(
      {
        // pi against the test's own scripted model (not the bridge's built-in one): provider `fake`
        // of the agent dir the scripted model wrote.
        'piBridge.bridge.env': { PI_BRIDGE_SCRIPTED_MODEL: '0', PI_CODING_AGENT_DIR: agentDir },
        'piBridge.pi.provider': 'fake',
        'piBridge.pi.model': 'text',
        // A second agent for the chat header's agent picker, cheap to run (the fake pi answers its
        // `text` scenario at once), and one that is not installed, which the picker disables.
        'piBridge.agents': {
          fake: { command: [join(bin, 'python3'), join(repoRoot, 'tests/fakes/fake_pi.py')], protocol: 'pi' },
          ghost: { command: ['pi-bridge-no-such-agent', '--acp'], protocol: 'acp' },
        },
        'piBridge.trace.server': 'messages',
        // As VS Code's desktop default (the web build saves after a delay): a buffer the user
        // does not save stays dirty, for the agent's edit of a dirty file. Set from the start: a
        // reload after changing it once left the web build saving anyway.
        'files.autoSave': 'off',
        'workbench.startupEditor': 'none',
        'workbench.tips.enabled': false,
        'workbench.enableExperiments': false,
        'security.workspace.trust.enabled': false,
        'telemetry.telemetryLevel': 'off',
        'extensions.autoCheckUpdates': false,
        'extensions.autoUpdate': false,
        'update.mode': 'none',
        'chat.disableAIFeatures': true,
        'remote.autoForwardPorts': false,
      },
      null,
      2,
    ),
  );
  const entry = join(codeServerDir, 'out/node/entry.js');
  const common = ['--user-data-dir', userData, '--extensions-dir', extensions, '--config', join(tmp, 'config.yaml')];
  const installed = execFileSync(node20, [entry, ...common, '--install-extension', vsix], {
    encoding: 'utf8',
    timeout: 120_000,
    env: userEnv(home),
  });
  assert.match(installed, /successfully installed/i, installed);

  const port = await freePort();
  codeServer = spawn(
    node20,
    [
      entry,
      ...common,
      '--bind-addr',
      `127.0.0.1:${port}`,
      '--auth',
      'none',
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--disable-getting-started-override',
      workspace,
    ],
    { env: userEnv(home), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  codeServerExit = new Promise((r) => codeServer.on('exit', (code) => r(code)));
  const listening = new Promise<void>((resolveListening) => {
    const onData = (chunk: Buffer): void => {
      codeServerLog += chunk.toString();
      if (codeServerLog.includes('HTTP server listening')) {
        resolveListening();
      }
    };
    codeServer.stdout?.on('data', onData);
    codeServer.stderr?.on('data', onData);
  });
  await withTimeout(listening, 60_000, 'code-server to listen');

  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage'],
    defaultViewport: { width: 1440, height: 900 },
  });
  page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`, {
    waitUntil: 'domcontentloaded',
    timeout: UI_TIMEOUT,
  });
  await page.waitForSelector('.monaco-workbench .part.statusbar', { visible: true, timeout: UI_TIMEOUT });
  // The explorer shows the workspace once the workbench has restored, and the extension's status
  // bar item once it has activated (its commands are in the palette from then on).
  await page.waitForSelector('.explorer-folders-view .monaco-list-row[aria-label*="hello.py"]', {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  await page.waitForSelector('.statusbar-item[aria-label="pi model: text"]', { visible: true, timeout: UI_TIMEOUT });
});

after(async () => {
  await browser?.close();
  if (codeServer && codeServer.exitCode === null) {
    codeServer.kill('SIGTERM');
    await withTimeout(codeServerExit, 30_000, 'code-server to exit').catch((err: unknown) => {
      codeServer.kill('SIGKILL');
      throw err;
    });
  }
  scriptedModel?.kill('SIGTERM');
  // Stopping code-server stops the extension host, whose deactivate stops the bridge and its runs.
  await waitUntil(() => processesMatching(/./).length === 0, 20_000, 'every process of the test to end');
  if (tmp) {
    if (failed) {
      // The workbench's logs (the extension's output channels included) explain a failure.
      cpSync(join(tmp, 'user-data/logs'), join(artifacts, 'logs'), { recursive: true });
      writeFileSync(join(artifacts, 'logs/code-server.log'), codeServerLog);
    }
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('pi: Ask… streams the answer into the chat, as the first turn of a conversation, with its final state', { timeout: 3 * UI_TIMEOUT }, () => step('ask', async () => {
  const frame = await askPi('Say hello to VS Code');
  const turn = await waitForTurn(frame, 'Say hello to VS Code', "status === 'completed'", 'a completed run');
  assert.ok(turn.assistant.trim().length > 0, 'the answer is shown');
  assert.match(turn.text, /Say hello to VS Code/);
  assert.match(turn.text, /Done · \d+(\.\d)? s · [\d,]+ tokens/);
  assert.match(turn.receipt, /completed · stop: \w+/);
  assert.match(turn.receipt, /\d+ tokens/);
  await screenshot('ask-1-completed.png');
  // The doctor runs beside the bridge's start: its report may land after the first run.
  const doctorLine = new RegExp(`doctor: ok pi: [\\d.]+ \\(${join(tmp, 'bin/pi')}, from PATH\\)`);
  const deadline = Date.now() + UI_TIMEOUT;
  while (!doctorLine.test(extensionLog()) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100)); // polling a log file: no event tells it grew
  }
  const log = extensionLog();
  assert.match(log, /bundled bridge on Python 3\.\d+: python3 \(from PATH\)/, log);
  assert.match(log, doctorLine, log);
}));

/** Make the next runs use `model` through the extension's own command, and wait until it shows. */
async function setModel(model: string, provider = 'fake'): Promise<void> {
  await runCommand('pi: Pick Model…');
  await pickListed(`${provider}/${model}`);
  await page.waitForSelector(`.statusbar-item[aria-label="pi model: ${model}"]`, { timeout: UI_TIMEOUT });
}

/** Ask pi `prompt` through pi: Ask… and its input box; the chat's frame, where the run shows. */
async function askPi(prompt: string): Promise<Frame> {
  await runCommand('pi: Ask…');
  await answerInputBox('Ask pi', prompt);
  return chatFrame();
}

/** In the open quick pick (pi: Pick Model…), filter to `label` and take the row whose label it is. */
async function pickListed(label: string): Promise<void> {
  const input = await page.waitForSelector('.quick-input-widget .quick-input-box input', { visible: true, timeout: UI_TIMEOUT });
  assert.ok(input);
  await input.type(label);
  // The agent's list arrives after the picker opens (pi/models): wait for the row itself.
  const row = `[...document.querySelectorAll('.quick-input-list .monaco-list-row')]
    .find((r) => r.querySelector('.label-name')?.textContent === ${JSON.stringify(label)})`;
  await page.waitForFunction(`!!(${row})`, { timeout: UI_TIMEOUT });
  await page.evaluate(`(${row}).click()`);
  await page.waitForSelector('.quick-input-widget', { hidden: true, timeout: UI_TIMEOUT });
}

test('thoughts render collapsed and tool calls with their status and output', { timeout: 3 * UI_TIMEOUT }, () => step('thoughts-tools', async () => {
  await setModel('thinking');
  const frame = await askPi('Think first, then answer');
  const thinking = await waitForTurn(frame, 'Think first, then answer', "status === 'completed'", 'the thinking run');
  assert.ok(thinking.thoughts.length > 0, 'a thought is shown');
  assert.deepEqual(thinking.thoughts[0], { open: false, summary: 'Thought' });

  await setModel('tool');
  await runCommand('pi: Ask…');
  await answerInputBox('Ask pi', 'Run echo hi');
  // The card offers a rule in words; taking it saves it for the workspace.
  await chatWait(frame, `!!(${pendingCard(/echo hi/)}) && !!(${pendingCard(/echo hi/)}).querySelector('[data-kind="allow_always"]')`);
  const always = (await frame.evaluate(`(${pendingCard(/echo hi/)}).querySelector('[data-kind="allow_always"]').textContent`)) as string;
  assert.equal(always, 'Always allow `echo hi` in this workspace');
  await answerCard(frame, /echo hi/, 'allow_always');
  const turn = await waitForTurn(frame, 'Run echo hi', "status === 'completed' && tools.length > 0", 'the tool run');
  const tool = turn.tools[0]!;
  assert.equal(tool.status, 'completed');
  assert.match(`${tool.name} ${tool.command} ${tool.status}`, /bash echo hi completed/);
  assert.match(tool.output, /hi/);

  // pi: Manage Permission Rules lists that rule; picking it removes it.
  await runCommand('pi: Manage Permission Rules');
  const rule = '.quick-input-list .monaco-list-row[aria-label*="allow bash `echo hi`"]';
  await page.waitForSelector(rule, { visible: true, timeout: UI_TIMEOUT });
  await page.click(rule); // in a multi-select pick, a click on a row ticks it
  await page.waitForSelector(`${rule}[aria-checked="true"]`, { timeout: UI_TIMEOUT });
  await page.keyboard.press('Enter');
  await page.waitForSelector('.notification-toast ::-p-text(removed 1 rule)', { visible: true, timeout: UI_TIMEOUT });
}));

test('Cancel in the progress notification stops a slow run and keeps its partial text', { timeout: 3 * UI_TIMEOUT }, () => step('cancel', async () => {
  await setModel('slow');

  const frame = await askPi('Tell me a long story');
  // Streaming: the run is still running and several deltas have arrived.
  const streaming = await waitForTurn(
    frame,
    'Tell me a long story',
    "status === 'running' && assistant.split(' ').length >= 12",
    'streamed text while running',
  );
  const cancel = await page.waitForSelector('.notification-toast .monaco-button::-p-text(Cancel)', {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  assert.ok(cancel);
  await screenshot('ask-2-streaming-with-progress.png');
  const runProcesses = processesMatching(PI_PROCESS);
  assert.ok(runProcesses.length > 0, 'pi runs while the run streams');
  await cancel.click();
  const cancelled = await waitForTurn(frame, 'Tell me a long story', "status === 'cancelled'", 'the cancelled run');
  assert.ok(
    cancelled.assistant.startsWith(streaming.assistant.trim().slice(0, 40)),
    `partial text kept: ${JSON.stringify(cancelled.assistant)}`,
  );
  assert.ok(cancelled.assistant.length >= streaming.assistant.trim().length);
  assert.match(cancelled.text, /Stopped · /);
  assert.match(cancelled.receipt, /cancelled · stopped \((exited|interrupted|killed)\)/);
  await screenshot('ask-3-cancelled.png');
  // The bridge answers a cancelled run only once its process tree is gone: every pid of the
  // receipt (shown in the turn's footer) is dead. Other pi processes may be alive on purpose: the
  // warm pool pre-spawns the next run's pi when a run ends.
  // Under the rpc engine the turn is aborted and the conversation's pi is kept (the receipt says
  // so); otherwise every pid of the receipt is gone.
  const kept = /stopped \(\w+\) in \d+ ms · nothing was running · pi kept for the conversation/.test(cancelled.receipt);
  const receipt = /stopped \(\w+\) in \d+ ms · \d+ process(?:es)? ended \(([\d, ]+)\)/.exec(cancelled.receipt);
  assert.ok(kept || receipt, `the turn shows the shutdown receipt: ${JSON.stringify(cancelled.receipt)}`);
  if (receipt) {
    const receiptPids = (receipt[1] ?? '').split(', ').map(Number);
    assert.ok(runProcesses.some((pid) => receiptPids.includes(pid)), 'the receipt names the run\'s pi');
    assert.deepEqual(receiptPids.filter(isAlive), [], 'no process of the cancelled run left');
  }
  assert.deepEqual(processesMatching(/^sleep 30/), [], 'no tool process left');
}));

/**
 * The webview frame of the chat view. Only the frame's main world is used for the chat (evaluate,
 * waitForFunction): puppeteer's isolated world (`$`, `waitForSelector`) did not come up in the
 * second webview of the workbench.
 */
async function chatFrame(): Promise<Frame> {
  let found: Frame | undefined;
  await waitUntilAsync(async () => {
    for (const frame of page.frames()) {
      try {
        if (await frame.evaluate("!!document.getElementById('thread')")) {
          found = frame;
          return true;
        }
      } catch {
        // A frame that navigated away while we looked.
      }
    }
    return false;
  }, UI_TIMEOUT, 'the chat webview');
  return found!;
}

/** Wait until `expression` holds in the chat frame. */
async function chatWait(frame: Frame, expression: string): Promise<void> {
  await frame.waitForFunction(expression, { timeout: UI_TIMEOUT, polling: 'mutation' });
}

/** Click the element `selector` of the chat frame. */
async function chatClick(frame: Frame, selector: string): Promise<void> {
  await chatWait(frame, `!!document.querySelector(${JSON.stringify(selector)})`);
  await frame.evaluate(`document.querySelector(${JSON.stringify(selector)}).click()`);
}

/** The JS expression of the pending approval card whose text matches `what` (null when none). */
function pendingCard(what: RegExp): string {
  return `[...document.querySelectorAll('.approval[data-state="pending"]')]
    .find((c) => new RegExp(${JSON.stringify(what.source)}).test(c.textContent)) ?? null`;
}

/**
 * The bridge asks before a tool runs (the extension declares `permissions`, so its conversations
 * start in ask mode and the question is a card in the chat): wait for the card about `what`, press
 * its button of option kind `kind` (with `reason` typed first), and see the card settled.
 */
async function answerCard(
  frame: Frame,
  what: RegExp,
  kind: 'allow_once' | 'allow_always' | 'reject_once' = 'allow_once',
  reason = '',
): Promise<void> {
  await chatWait(frame, `!!(${pendingCard(what)})`);
  const key = (await frame.evaluate(`(${pendingCard(what)}).dataset.key`)) as string;
  const card = `document.querySelector('.approval[data-key="${key}"]')`;
  if (reason) {
    await frame.evaluate(`${card}.querySelector('.approval-reason').value = ${JSON.stringify(reason)}`);
  }
  await frame.evaluate(`${card}.querySelector('button.approval-option[data-kind="${kind}"]').click()`);
  await chatWait(frame, `${card}.dataset.state === 'answered' && [...${card}.querySelectorAll('.approval-option')].every((b) => b.disabled)`);
}

/** Type `text` into the chat's input and press Enter (Alt+Enter with `queue`). */
async function sendInChat(frame: Frame, text: string): Promise<void> {
  await chatWait(frame, "!!document.getElementById('prompt')");
  // Focus can still be moving (a closing quick pick, a reloaded view): keys typed then land
  // elsewhere, so the input is checked and the typing redone, a bounded number of times.
  for (let attempt = 1; ; attempt++) {
    await frame.evaluate("document.getElementById('prompt').value = ''; document.getElementById('prompt').focus()");
    await page.keyboard.type(text);
    const typed = await frame
      .waitForFunction(`document.getElementById('prompt').value === ${JSON.stringify(text)}`, { timeout: 5000 })
      .then(() => true, () => false);
    if (typed) break;
    assert.ok(attempt < 3, `the chat input never received ${JSON.stringify(text)}: focus was elsewhere`);
  }
  // An editor the window restores after a reload can take the focus between the typing and the
  // Enter (the text stays in the input, unsent): the Enter is pressed on the input itself, again
  // while the text is still there, a bounded number of times.
  const prompt = await frame.$('#prompt');
  for (let attempt = 1; ; attempt++) {
    await prompt!.press('Enter');
    const sent = await frame
      .waitForFunction("document.getElementById('prompt').value === ''", { timeout: 5000 })
      .then(() => true, () => false);
    if (sent) break;
    const still = (await frame.evaluate("document.getElementById('prompt').value")) as string;
    assert.ok(still === text && attempt < 3, `the chat input kept ${JSON.stringify(still)} after Enter`);
  }
}

interface Turn {
  status: string;
  prompt: string;
  text: string;
  /** The bridge's account of how the run ended (the footer's receipt, one click away). */
  receipt: string;
  assistant: string;
  steered: string[];
  thoughts: { open: boolean; summary: string }[];
  tools: { status: string; name: string; command: string; output: string; edit: string }[];
}

/** The chat turn whose prompt is `prompt`, once `predicate` (over the Turn's fields) holds. */
async function waitForTurn(frame: Frame, prompt: string, predicate: string, what: string): Promise<Turn> {
  const handle = await frame.waitForFunction(
    `(() => {
       const s = [...document.querySelectorAll('section.turn')]
         .find((t) => t.querySelector('.prompt .prompt-text')?.textContent === ${JSON.stringify(prompt)});
       if (!s) return false;
       const status = s.dataset.status;
       const text = s.innerText;
       const receipt = s.querySelector('.turn-receipt code')?.textContent ?? '';
       const assistant = [...s.querySelectorAll('.assistant')].map((a) => a.innerText).join(' ');
       const steered = [...s.querySelectorAll('.steered .prompt-text')].map((a) => a.textContent);
       const thoughts = [...s.querySelectorAll('details.thought')].map((d) => ({
         open: d.open, summary: d.querySelector('summary').textContent }));
       const tools = [...s.querySelectorAll('.tool')].map((d) => ({
         status: d.dataset.status, name: d.querySelector('.tool-name').textContent,
         command: d.querySelector('.tool-command').textContent,
         output: d.querySelector('pre.tool-output')?.textContent ?? '',
         edit: d.querySelector('.edit')?.innerText ?? '' }));
       return (${predicate}) ? { status, prompt: ${JSON.stringify(prompt)}, text, receipt, assistant, steered, thoughts, tools } : false;
     })()`,
    { timeout: UI_TIMEOUT, polling: 'mutation' },
  );
  const turn = (await handle.jsonValue()) as Turn | false;
  assert.ok(turn, what);
  return turn;
}

/** The user texts of every request that reached the scripted model, oldest first. */
async function modelRequests(): Promise<{ model: string; userTexts: string[] }[]> {
  const response = await fetch(`${scriptedModelUrl}${SCRIPTED_REQUESTS_PATH}`);
  assert.equal(response.status, 200);
  return ((await response.json()) as { requests: { model: string; userTexts: string[] }[] }).requests;
}

/** The requests whose last user text is `text`. */
async function requestsEndingWith(text: string): Promise<string[][]> {
  return (await modelRequests()).map((r) => r.userTexts).filter((texts) => texts[texts.length - 1] === text);
}

const tag = Date.now().toString(36);
const FIRST = `first question ${tag}`;
const SECOND = `second question ${tag}`;

test('pi: Ask About Selection adds a context chip, the chat prompt carries the selected lines, and pi: Show Bridge Log shows the log', { timeout: 3 * UI_TIMEOUT }, () => step('selection-chip', async () => {
  // The `echo` model answers with the prompt it was sent, so the turn shows what reached the model.
  await setModel('echo');
  // The one-shot runs before showed the chat in the side bar, where the Explorer was.
  await runCommand('View: Show Explorer');
  await page.waitForSelector('.explorer-folders-view .monaco-list-row[aria-label*="hello.py"]', {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  await page.click('.explorer-folders-view .monaco-list-row[aria-label*="hello.py"]');
  await page.waitForSelector('.editor-instance .monaco-editor .view-line', { visible: true, timeout: UI_TIMEOUT });
  await page.click('.editor-instance .monaco-editor .view-lines');
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyA');
  await page.keyboard.up('Control');
  await runCommand('pi: Ask About Selection');
  const frame = await chatFrame();
  await chatWait(frame, `[...document.querySelectorAll('#chips .chip')].some((c) => c.textContent.startsWith('hello.py:1'))`);
  await screenshot('chat-1-context-chip.png');
  await sendInChat(frame, 'What does this print?');
  const turn = await waitForTurn(frame, 'What does this print?', "status === 'completed'", 'the selection turn');
  assert.ok(turn.assistant.includes('ECHO:What does this print?'), `the question reached the model: ${turn.assistant}`);
  assert.ok(turn.assistant.includes('hello.py'), `the file's name reached the model: ${turn.assistant}`);
  assert.ok(turn.assistant.includes('print("hello")'), `the selected lines reached the model: ${turn.assistant}`);
  assert.match(turn.text, /hello\.py:1-2/, 'the turn shows its chip');
  assert.equal(await frame.evaluate("document.querySelectorAll('#chips .chip').length"), 0, 'the chip went with that prompt');

  await runCommand('pi: Show Bridge Log');
  // The output channel is a read-only editor in the panel (spaces render as U+00A0) that shows
  // its last lines: the bridge's start, each one-shot run's outcome, the doctor's report.
  await page.waitForFunction(
    `[...document.querySelectorAll('.part.panel .view-lines')].some((el) =>
       /\\[info\\].(bridge.ready|run.chat-\\S+:.(completed|cancelled)|doctor:)/.test(el.textContent))`,
    { timeout: UI_TIMEOUT },
  );
}));

test('two turns in one conversation: the second model request holds the first turn, and the status bar shows the context used', { timeout: 3 * UI_TIMEOUT }, () => step('two-turns', async () => {
  await setModel('text');
  await runCommand('View: Hide Panel');
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  await chatWait(frame, "document.querySelectorAll('section.turn').length === 0");
  await sendInChat(frame, FIRST);
  await waitForTurn(frame, FIRST, "status === 'completed'", 'the first turn');
  await sendInChat(frame, SECOND);
  const second = await waitForTurn(frame, SECOND, "status === 'completed'", 'the second turn');
  assert.ok(second.assistant.includes('Hello from the fake model'), second.assistant);
  const [request] = await requestsEndingWith(SECOND);
  assert.ok(request, 'the second prompt reached the model');
  assert.deepEqual(request.filter((t) => t === FIRST || t === SECOND), [FIRST, SECOND], 'the second request holds the first turn');
  const status = await page.waitForSelector('.statusbar-item[aria-label="pi model: text"]::-p-text(ctx)', {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  assert.ok(status);
  const label = await status.evaluate((el) => el.textContent ?? '');
  assert.match(label, /pi: fake\/text · ctx \d+\.\d%/, `the status bar shows context and cost: ${label}`);
  await screenshot('chat-2-two-turns.png');

  // The mode: ask by default; picked from the status bar, then from the chat's header.
  await page.waitForSelector('.statusbar-item[aria-label="pi mode: ask"]', { visible: true, timeout: UI_TIMEOUT });
  await page.click('.statusbar-item[aria-label="pi mode: ask"] a, .statusbar-item[aria-label="pi mode: ask"]');
  await page.waitForSelector('.quick-input-list .monaco-list-row[aria-label*="plan"]', { visible: true, timeout: UI_TIMEOUT });
  await page.click('.quick-input-list .monaco-list-row[aria-label*="plan"]');
  await page.waitForSelector('.statusbar-item[aria-label="pi mode: plan"]', { visible: true, timeout: UI_TIMEOUT });
  await chatWait(frame, "document.getElementById('mode').value === 'plan' && document.getElementById('live').textContent === 'mode: plan'");
  await frame.evaluate("(() => { const s = document.getElementById('mode'); s.value = 'ask'; s.dispatchEvent(new Event('change')); })()");
  await page.waitForSelector('.statusbar-item[aria-label="pi mode: ask"]', { visible: true, timeout: UI_TIMEOUT });
  await chatWait(frame, "document.getElementById('live').textContent === 'mode: ask'");
}));

test('a message sent while a run goes steers it, and pi takes it in', { timeout: 3 * UI_TIMEOUT }, () => step('steer', async () => {
  await setModel('toolsteer');
  const frame = await chatFrame();
  const prompt = `run the slow tool ${tag}`;
  const steer = `and then say it is steered ${tag}`;
  await sendInChat(frame, prompt);
  // The card takes the focus from the (empty) input: Enter allows.
  await chatWait(frame, `!!(${pendingCard(/sleep 2/)}) && document.activeElement === (${pendingCard(/sleep 2/)})`);
  await page.keyboard.press('Enter');
  await chatWait(frame, "document.querySelector('.approval').dataset.state === 'answered'");
  await waitForTurn(frame, prompt, "tools.length > 0 && tools[0].status === 'running'", 'the running tool');
  await chatWait(frame, `!!document.querySelector('#send[data-action="stop"]')`);
  await sendInChat(frame, steer);
  // The model, steered, runs the tool once more: Deny it with a reason, which pi is told.
  const reason = `not twice ${tag}`;
  await answerCard(frame, /sleep 2/, 'reject_once', reason);
  const turn = await waitForTurn(frame, prompt, `status === 'completed' && steered.length > 0`, 'the steered turn');
  assert.deepEqual(turn.steered, [steer], 'the steer is shown once pi took it in');
  assert.deepEqual(turn.tools.map((t) => t.status), ['completed', 'failed'], 'the denied call failed and the run went on');
  assert.match(turn.text, new RegExp(`Denied: ${reason}`), 'the card says how it was answered');
  assert.ok(turn.assistant.includes(reason), `the model was told the reason: ${turn.assistant}`);
  const requests = await requestsEndingWith(steer);
  assert.ok(requests.length > 0, 'the steering message reached the model in the same conversation');
  assert.ok(requests[0]!.includes(FIRST), 'in the same conversation');
  await screenshot('chat-3-steered.png');
}));

test('Stop ends a streaming run and its partial text stays', { timeout: 3 * UI_TIMEOUT }, () => step('stop', async () => {
  await setModel('slow');
  const frame = await chatFrame();
  const prompt = `tell me a long story ${tag}`;
  await sendInChat(frame, prompt);
  const streaming = await waitForTurn(frame, prompt, "status === 'running' && assistant.split(' ').length >= 8", 'streamed text');
  await chatWait(frame, `!!document.querySelector('#send[data-action="stop"][aria-label="Stop the run"]')`);
  await screenshot('chat-4-streaming.png');
  await chatClick(frame, '#send[data-action="stop"]');
  const stopped = await waitForTurn(frame, prompt, "status === 'cancelled'", 'the stopped turn');
  assert.ok(stopped.assistant.startsWith(streaming.assistant.trim().slice(0, 30)), `partial text kept: ${stopped.assistant}`);
  assert.match(stopped.text, /Stopped/);
  await chatWait(frame, `!!document.querySelector('#send[data-action="send"]')`);
  await chatWait(frame, "document.getElementById('live').textContent === 'pi cancelled'");

  // Stop while a card waits: the bridge withdraws the request ($/cancelRequest), the card says
  // cancelled and can no longer be answered, and nothing ran.
  await setModel('tool');
  const asked = `run echo while I stop ${tag}`;
  await sendInChat(frame, asked);
  await chatWait(frame, `!!(${pendingCard(/echo hi/)})`);
  // With the chat hidden, its icon counts the waiting card; shown again, the card is still there.
  await runCommand('View: Show Explorer');
  const piIcon = '.activitybar .action-item:is([aria-label^="pi"], :has(> [aria-label^="pi"]))';
  await page.waitForSelector(`${piIcon} .badge-content::-p-text(1)`, { visible: true, timeout: UI_TIMEOUT });
  await page.click(`${piIcon} .action-label`);
  await page.waitForFunction(
    `![...document.querySelectorAll(${JSON.stringify(`${piIcon} .badge-content`)})].some((b) => b.offsetParent && b.textContent.trim())`,
    { timeout: UI_TIMEOUT },
  );
  const shown = await chatFrame();
  await chatWait(shown, `!!(${pendingCard(/echo hi/)})`);
  await chatClick(shown, '#send[data-action="stop"]');
  await waitForTurn(shown, asked, "status === 'cancelled'", 'the turn stopped while asking');
  await chatWait(
    shown,
    `[...document.querySelectorAll('section.turn')].at(-1).querySelector('.approval[data-state="cancelled"]')
       && [...[...document.querySelectorAll('section.turn')].at(-1).querySelectorAll('.approval-option, .approval-reason')].every((b) => b.disabled)`,
  );
  const stoppedTurn = await waitForTurn(shown, asked, "status === 'cancelled'", 'the turn stopped while asking');
  assert.ok(stoppedTurn.tools.every((t) => t.status !== 'completed'), 'the tool did not run');
}));

test('Open Diff on an edit shows the file before and after the edit', { timeout: 3 * UI_TIMEOUT }, () => step('diff', async () => {
  await setModel('edit');
  const frame = await chatFrame();
  const prompt = `please edit the notes ${tag}`;
  await sendInChat(frame, prompt);
  // The card shows the lines the edit would remove and add, before it runs.
  const card = pendingCard(/notes\.txt/);
  await chatWait(
    frame,
    `!!(${card}) && [...(${card}).querySelectorAll('.line-removed')].some((l) => l.textContent === '- line two\\n')
       && [...(${card}).querySelectorAll('.line-added')].some((l) => l.textContent === '+ line 2, edited\\n')
       && !!(${card}).querySelector('button.open-diff') && !!(${card}).querySelector('[data-kind="reject_once"]')`,
  );
  await screenshot('chat-approval.png');
  await frame.evaluate(`(${card}).querySelector('button.open-diff').click()`);
  await page.waitForSelector('.tab[aria-label*="notes.txt (proposed by pi)"]', { visible: true, timeout: UI_TIMEOUT });
  await page.waitForFunction(
    `(() => {
       const sides = (cls) => [...document.querySelectorAll('.monaco-diff-editor .editor.' + cls + ' .view-lines')]
         .map((el) => el.textContent.replace(/\u00a0/g, ' ')).join('');
       return sides('original').includes('line two') && sides('modified').includes('line 2, edited');
     })()`,
    { timeout: UI_TIMEOUT },
  );
  await answerCard(frame, /notes\.txt/);
  const turn = await waitForTurn(frame, prompt, "status === 'completed' && tools.some((t) => t.edit)", 'the edit');
  const edit = turn.tools.find((t) => t.edit)!;
  assert.equal(edit.status, 'completed');
  assert.match(edit.edit, /notes\.txt\s*\+1\s*−1\s*Open Diff/, edit.edit);
  await chatClick(frame, '.edit button.open-diff');
  await page.waitForSelector('.tab[aria-label*="notes.txt (pi)"]', { visible: true, timeout: UI_TIMEOUT });
  await page.waitForFunction(
    `(() => {
       const sides = (cls) => [...document.querySelectorAll('.monaco-diff-editor .editor.' + cls + ' .view-lines')]
         .map((el) => el.textContent.replace(/\\u00a0/g, ' ')).join('');
       return sides('original').includes('line two') && sides('modified').includes('line 2, edited')
         && !sides('modified').includes('line two');
     })()`,
    { timeout: UI_TIMEOUT },
  );
  await screenshot('chat-5-open-diff.png');
}));

/** A 1×1 PNG, as a pasted screenshot would arrive. */
const PNG_1PX = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

test('issue 35: an @-mention completes and carries the file, a pasted image reaches the model, a tool waits "for you" and its card is answered in place (✗), the footer speaks plainly', { timeout: 5 * UI_TIMEOUT }, () => step('issue35', async () => {
  await setModel('echo');
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  await chatWait(frame, "document.querySelectorAll('section.turn').length === 0");
  const notes = join(tmp, 'workspace/notes.txt');
  const notesBefore = readFileSync(notes, 'utf8');

  // @-mention with completion: the popup lists the workspace's file, Tab takes it, the file's text
  // goes with the prompt (the echo model answers with what reached it).
  for (let attempt = 1; ; attempt++) {
    await frame.evaluate("document.getElementById('prompt').value = ''; document.getElementById('prompt').focus()");
    await page.keyboard.type('Summarize @note');
    const shown = await frame
      .waitForFunction("!!document.querySelector('#mentions:not([hidden]) li[data-mention=\"notes.txt\"]')", { timeout: 10_000, polling: 'mutation' })
      .then(() => true, () => false);
    if (shown) break;
    assert.ok(attempt < 3, 'the @ completion never showed notes.txt');
  }
  await screenshot('vscode-chat-mention-completion.png');
  await page.keyboard.press('Tab');
  await chatWait(frame, "document.getElementById('prompt').value === 'Summarize @notes.txt '");
  const mentioned = `Summarize @notes.txt ${tag}`;
  await page.keyboard.type(tag);
  await page.keyboard.press('Enter');
  await waitForTurn(frame, mentioned, "status === 'completed'", 'the mention turn');
  const mentionRequest = (await modelRequests()).reverse().find((r) => r.userTexts.at(-1)?.startsWith(mentioned));
  assert.ok(mentionRequest, 'the mentioned prompt reached the model');
  assert.ok(mentionRequest.userTexts.at(-1)!.includes(notesBefore.split('\n')[0]!), `the file's text went with it: ${mentionRequest.userTexts.at(-1)}`);

  // A pasted image: a thumbnail above the input, then in the model's request.
  await frame.evaluate(`(() => {
    const bytes = Uint8Array.from(atob('${PNG_1PX}'), (c) => c.charCodeAt(0));
    const data = new DataTransfer();
    data.items.add(new File([bytes], 'shot.png', { type: 'image/png' }));
    document.getElementById('prompt').focus();
    document.getElementById('prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
  })()`);
  await chatWait(frame, "document.querySelectorAll('#images img').length === 1");
  await frame.evaluate("document.getElementById('prompt').value = 'What is in this picture?'");
  await screenshot('vscode-chat-image-pasted.png');
  const pictured = `What is in this picture? ${tag}`;
  await sendInChat(frame, pictured);
  await waitForTurn(frame, pictured, "status === 'completed'", 'the image turn');
  const requests = (await (await fetch(`${scriptedModelUrl}${SCRIPTED_REQUESTS_PATH}`)).json()) as { requests: { userTexts: string[]; userImages: string[] }[] };
  const withImage = requests.requests.filter((r) => r.userTexts.at(-1) === pictured);
  assert.ok(withImage.length > 0, 'the image prompt reached the model');
  assert.deepEqual(withImage[0]!.userImages, [`data:image/png;base64,${PNG_1PX}`], 'the pasted image reached the model');

  // An approval: the tool card waits "for you"; a denial folds the card in place with ✗.
  writeFileSync(notes, EDIT_ORIGINAL);
  try {
    await setModel('edit');
    const prompt = `edit the notes, then stop ${tag}`;
    await sendInChat(frame, prompt);
    const card = pendingCard(/notes\.txt/);
    await chatWait(frame, `!!(${card}) && [...document.querySelectorAll('.tool .tool-state')].some((s) => s.textContent === 'waiting for you')`);
    await frame.evaluate(`(${card}).scrollIntoView({ block: 'center' })`);
    await screenshot('vscode-chat-approval-waiting.png');
    const widths = (await frame.evaluate(`[...(${card}).querySelectorAll('button.approval-option')].map((b) => Math.round(b.getBoundingClientRect().width))`)) as number[];
    assert.ok(widths.length >= 2 && Math.max(...widths) - Math.min(...widths) <= 1, `even buttons: ${JSON.stringify(widths)}`);
    await answerCard(frame, /notes\.txt/, 'reject_once', 'not now');
    const turn = await waitForTurn(frame, prompt, "status !== 'running'", 'the denied edit');
    const shown = (await frame.evaluate(`(() => {
      const s = [...document.querySelectorAll('section.turn')].at(-1);
      const c = s.querySelector('.approval');
      return { inTool: !!c.closest('.tool'), icon: c.querySelector('.approval-icon').textContent,
        diffShown: [...c.querySelectorAll('.approval-diff')].some((d) => d.offsetParent !== null),
        footer: s.querySelector('.turn-summary').textContent, receipt: s.querySelector('.turn-receipt code')?.textContent ?? '' };
    })()`)) as { inTool: boolean; icon: string; diffShown: boolean; footer: string; receipt: string };
    assert.deepEqual([shown.inTool, shown.icon, shown.diffShown], [true, '✗', false], JSON.stringify(shown));
    assert.match(shown.footer, /^Done · \d+(\.\d)? s · [\d,]+ tokens/, JSON.stringify(shown));
    assert.doesNotMatch(shown.footer, /stop:|survivor|nothing was running/);
    assert.match(shown.receipt, /^completed · stop: /);
    assert.equal(readFileSync(notes, 'utf8'), EDIT_ORIGINAL, 'a denied edit changed nothing');
    void turn;
    await frame.evaluate("[...document.querySelectorAll('section.turn')].at(-1).querySelector('.turn-receipt').open = true");
    await frame.evaluate("[...document.querySelectorAll('section.turn')].at(-1).scrollIntoView({ block: 'end' })");
    await screenshot('vscode-chat-approval-denied-in-place.png');
  } finally {
    writeFileSync(notes, notesBefore);
  }
  // No New Conversation here: the chat taking the focus back raced the next test's Command Palette
  // (its typing landed in the chat); the next test opens the conversation it wants.
}));

test('after pi: Restart Bridge, pi: Open Conversation… shows an earlier conversation and continues it', { timeout: 4 * UI_TIMEOUT }, () => step('reopen', async () => {
  await setModel('text');
  await runCommand('pi: Restart Bridge');
  await runCommand('pi: Open Conversation…');
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${FIRST}"]`, { visible: true, timeout: UI_TIMEOUT });
  await screenshot('chat-6-open-conversation.png');
  await page.click(`.quick-input-list .monaco-list-row[aria-label*="${FIRST}"]`);
  const frame = await chatFrame();
  await waitForTurn(frame, FIRST, "status === 'completed' && assistant.length > 0", 'the first turn from history');
  await waitForTurn(frame, SECOND, "status === 'completed' && assistant.length > 0", 'the second turn from history');
  const third = `third question ${tag}`;
  await sendInChat(frame, third);
  await waitForTurn(frame, third, "status === 'completed'", 'the third turn');
  const [request] = await requestsEndingWith(third);
  assert.ok(request, 'the third prompt reached the model');
  assert.ok(request.includes(FIRST) && request.includes(SECOND), `the reopened conversation continued: ${JSON.stringify(request)}`);
  await screenshot('chat-7-reopened-conversation.png');
}));

test('the current conversation survives a window reload', { timeout: 3 * UI_TIMEOUT }, () => step('reload', async () => {
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  await page.waitForSelector('.statusbar-item[aria-label="pi model: text"]', { visible: true, timeout: UI_TIMEOUT });
  const frame = await chatFrame();
  // The webview kept only the session id; the extension host renders the rest from pi/session.
  await waitForTurn(frame, FIRST, "status === 'completed' && assistant.length > 0", 'the first turn after the reload');
  await waitForTurn(frame, `third question ${tag}`, "status === 'completed' && assistant.length > 0", 'the last turn after the reload');
  await screenshot('chat-8-after-reload.png');
  // The next tests reload without pi or Python: start them without a conversation to restore.
  await runCommand('pi: New Conversation');
  await chatWait(frame, "document.querySelectorAll('section.turn').length === 0");
}));

test('/ in the chat input lists the commands; /compact with instructions compacts the conversation behind a divider', { timeout: 4 * UI_TIMEOUT }, () => step('compact', async () => {
  await setModel('text');
  const frame = await chatFrame();
  const first = `compact me ${tag}`;
  await sendInChat(frame, first);
  await waitForTurn(frame, first, "status === 'completed'", 'the first turn');
  const popup = "!document.getElementById('commands').hidden";
  const names = "[...document.querySelectorAll('#commands li')].map((li) => li.dataset.name)";
  const typeSlash = async (): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      await frame.evaluate("document.getElementById('prompt').value = ''; document.getElementById('prompt').focus()");
      await page.keyboard.type('/');
      const shown = await frame
        .waitForFunction(`${popup} && ${names}.includes('compact')`, { timeout: 10_000, polling: 'mutation' })
        .then(() => true, () => false);
      if (shown) return;
      assert.ok(attempt < 3, `no command list after typing / (input: ${String(await frame.evaluate("document.getElementById('prompt').value"))})`);
    }
  };
  await typeSlash();
  const listed = (await frame.evaluate(names)) as string[];
  for (const name of ['compact', 'autocompact', 'name', 'export', 'new', 'review-notes']) {
    assert.ok(listed.includes(name), `/${name} is listed: ${JSON.stringify(listed)}`);
  }
  const notes = (await frame.evaluate(
    "document.querySelector('#commands li[data-name=\"review-notes\"]').textContent",
  )) as string;
  assert.match(notes, /Review the notes file\s*prompt$/, 'a prompt template, with its description and source');
  await chatWait(frame, `document.getElementById('title').textContent === ${JSON.stringify(first)}`);
  await screenshot('chat-9-commands.png');
  await page.keyboard.press('Escape');
  await chatWait(frame, "document.getElementById('commands').hidden");

  // A long answer, then a short turn: pi keeps the last turn and summarizes the long one (the
  // `text` model's summary is short).
  await setModel('long');
  const long = `a long answer ${tag}`;
  await sendInChat(frame, long);
  await waitForTurn(frame, long, "status === 'completed'", 'the long turn');
  await setModel('text');
  const second = `and a short one ${tag}`;
  await sendInChat(frame, second);
  await waitForTurn(frame, second, "status === 'completed'", 'the short turn');
  await typeSlash();
  await page.keyboard.type('comp');
  await chatWait(frame, "document.querySelector('#commands li[aria-selected=\"true\"]')?.dataset.name === 'compact'");
  await page.keyboard.press('Tab');
  await chatWait(frame, "document.getElementById('prompt').value === '/compact ' && document.getElementById('commands').hidden");
  const instructions = `keep the test names ${tag}`;
  await page.keyboard.type(instructions);
  await page.keyboard.press('Enter');
  const prompt = `/compact ${instructions}`;
  await waitForTurn(frame, prompt, "status === 'completed' && !!s.querySelector('.compaction[data-state=\"compacted\"]')", 'the compaction divider');
  const divider = (await frame.evaluate(
    "[...document.querySelectorAll('.compaction[data-state=\"compacted\"]')].at(-1).textContent",
  )) as string;
  assert.match(divider, /^Context compacted: [\d.]+k? → [\d.]+k? tokens$/, divider);
  const [before, after] = [...divider.matchAll(/([\d.]+)(k?)/g)].map((m) => Number(m[1]) * (m[2] ? 1000 : 1));
  assert.ok(after! < before!, `the context shrank: ${divider}`);
  const requests = await modelRequests();
  assert.ok(
    requests.some((r) => r.userTexts.some((t) => t.includes(instructions))),
    'the instructions reached the model with the summary request',
  );
  await screenshot('chat-10-compacted.png');
}));

test('pi: Open Conversation… renames a conversation (the chat\'s title follows) and deletes one after a confirm', { timeout: 4 * UI_TIMEOUT }, () => step('rename-delete', async () => {
  const frame = await chatFrame();
  const first = `compact me ${tag}`;
  const renamed = `Renamed in VS Code ${tag}`;
  await runCommand('pi: Open Conversation…');
  const row = (label: string): string => `.quick-input-list .monaco-list-row[aria-label*="${label}"]`;
  await page.waitForSelector(row(first), { visible: true, timeout: UI_TIMEOUT });
  await page.hover(row(first));
  await page.click(`${row(first)} .action-label[aria-label="Rename"], ${row(first)} .codicon-edit`);
  await answerInputBox('Rename Conversation', renamed);
  // The list comes back with the new title; the chat, which shows that conversation, follows.
  await page.waitForSelector(row(renamed), { visible: true, timeout: UI_TIMEOUT });
  await chatWait(frame, `document.getElementById('title').textContent === ${JSON.stringify(renamed)}`);
  await page.waitForSelector(`.pane-header[aria-label*="Chat"] .description::-p-text(${renamed}), .pane-header .description::-p-text(${renamed})`, {
    timeout: UI_TIMEOUT,
  });
  await screenshot('chat-11-rename.png');
  await page.hover(row(renamed));
  await page.click(`${row(renamed)} .action-label[aria-label="Delete"], ${row(renamed)} .codicon-trash`);
  const confirm = await page.waitForSelector('.monaco-dialog-box .monaco-button::-p-text(Delete)', { visible: true, timeout: UI_TIMEOUT });
  assert.ok(confirm);
  const question = await page.$eval('.monaco-dialog-box', (el) => el.textContent ?? '');
  assert.match(question, new RegExp(`Delete the pi conversation "${renamed}"\\?`));
  await confirm.click();
  // Back in the list, without it; the chat starts a new conversation.
  await page.waitForSelector('.quick-input-widget .quick-input-title::-p-text(Open Conversation)', { visible: true, timeout: UI_TIMEOUT });
  await page.waitForFunction(`!document.querySelector(${JSON.stringify(row(renamed))})`, { timeout: UI_TIMEOUT });
  await chatWait(frame, "document.querySelectorAll('section.turn').length === 0 && document.getElementById('title').textContent === ''");
  await page.keyboard.press('Escape');
}));
test('Restore checkpoint on a user message previews the files (Open Diff, a conflict) and rewinds files and conversation', { timeout: 5 * UI_TIMEOUT }, () => step('restore-checkpoint', () =>
  restoreCheckpointFlow({ page, workspace: join(tmp, 'workspace'), tag, timeout: UI_TIMEOUT, chatFrame, chatWait, sendInChat, waitForTurn, answerCard: (frame, what) => answerCard(frame, what), setModel, screenshot, requestsEndingWith }),
));

/** The chat header's agent picker: each option's value, label, whether it is enabled, its tooltip. */
async function agentOptions(frame: Frame): Promise<{ value: string; label: string; disabled: boolean; title: string }[]> {
  return (await frame.evaluate(`[...document.getElementById('agent').options].map((o) => ({
    value: o.value, label: o.textContent, disabled: o.disabled, title: o.title }))`)) as {
    value: string;
    label: string;
    disabled: boolean;
    title: string;
  }[];
}

const FAKE_PI_TEXT = 'Hello from the fake pi. It streams a few deltas.';

test('issue 37: the chat header picks the agent per conversation: its runs go to it, a missing one is disabled, another one starts anew', { timeout: 4 * UI_TIMEOUT }, () => step('agent-picker', async () => {
  await setModel('text'); // the fake pi's scenario, and a plain answer from pi
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  await chatWait(frame, "!document.getElementById('agent').hidden && document.getElementById('agent').options.length >= 3");
  const options = await agentOptions(frame);
  const byName = new Map(options.map((o) => [o.value, o]));
  assert.equal(await frame.evaluate("document.getElementById('agent').value"), 'pi', 'a new conversation runs the default agent');
  assert.match(byName.get('pi')?.label ?? '', /^pi \d+\.\d+\.\d+$/, 'pi with its version');
  assert.equal(byName.get('fake')?.disabled, false, `the fake is selectable: ${JSON.stringify(options)}`);
  assert.deepEqual(
    byName.get('ghost'),
    { value: 'ghost', label: 'ghost (not found)', disabled: true, title: 'not found: pi-bridge-no-such-agent --acp' },
    'the missing agent is shown disabled, saying why',
  );

  const modelOptions = "document.getElementById('model').options.length";
  await chatWait(frame, `${modelOptions} > 1`); // pi's own models
  await frame.select('#agent', 'fake');
  const first = `which agent answers ${tag}`;
  await sendInChat(frame, first);
  const fakeTurn = await waitForTurn(frame, first, "status === 'completed'", 'the fake agent answered');
  assert.equal(fakeTurn.assistant.trim(), FAKE_PI_TEXT, "the answer is the fake pi's");
  const second = `and the follow-up ${tag}`;
  await sendInChat(frame, second);
  const followUp = await waitForTurn(frame, second, "status === 'completed'", 'the follow-up answered');
  assert.equal(followUp.assistant.trim(), FAKE_PI_TEXT, 'the follow-up went to the fake pi too');
  assert.equal(await frame.evaluate("document.getElementById('agent').value"), 'fake', "the picker shows the conversation's agent");
  assert.deepEqual(await requestsEndingWith(first), [], "the model never saw the fake agent's prompt");
  assert.deepEqual(await requestsEndingWith(second), [], '...nor its follow-up');
  // pi/models takes no agent: the dropdown shows no list it cannot vouch for, only the next model.
  await chatWait(frame, `${modelOptions} === 1 && document.getElementById('model').value === 'fake/text'`);
  await screenshot('agent-picker-1-fake.png');

  // Another agent in a conversation with turns: a new conversation on it.
  await frame.select('#agent', 'pi');
  await chatWait(frame, "document.querySelectorAll('section.turn').length === 0 && document.getElementById('agent').value === 'pi'");
  await chatWait(frame, `${modelOptions} > 1`); // pi's models again
  const third = `back to pi ${tag}`;
  await sendInChat(frame, third);
  const piTurn = await waitForTurn(frame, third, "status === 'completed'", 'pi answered');
  assert.notEqual(piTurn.assistant.trim(), FAKE_PI_TEXT);
  assert.equal((await requestsEndingWith(third)).length, 1, 'pi asked the model once, with the new prompt');
  await screenshot('agent-picker-2-pi.png');
}));

test('issue 38: pi\'s edit of a file left dirty in VS Code goes through the editor: the buffer gets it beside the unsaved text, the disk is not written', { timeout: 4 * UI_TIMEOUT }, () => step('dirty-edit', async () => {
  // Real pi on the scripted model's `script` scenario edits dirty.txt while the user's typing in it
  // is unsaved: the bridge (which the client keeps in sync) must send the edit as
  // workspace/applyEdit instead of writing the file behind the buffer.
  const settingsFile = join(tmp, 'user-data/User/settings.json');
  const original = readFileSync(settingsFile, 'utf8');
  const workspace = join(tmp, 'workspace');
  const file = join(workspace, 'dirty.txt');
  writeFileSync(file, EDIT_ORIGINAL);
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyP');
  await page.keyboard.up('Control');
  const input = await page.waitForSelector('.quick-input-widget .quick-input-box input', { visible: true, timeout: UI_TIMEOUT });
  await input!.type('dirty.txt');
  await page.waitForSelector('.quick-input-list .monaco-list-row[aria-label*="dirty.txt"]', { visible: true, timeout: UI_TIMEOUT });
  await page.keyboard.press('Enter');
  // The user types at the end of the file and does not save.
  await page.waitForSelector('.tabs-container .tab.active[aria-label*="dirty.txt"]', { visible: true, timeout: UI_TIMEOUT });
  await page.waitForSelector('.editor-instance .monaco-editor .view-line', { visible: true, timeout: UI_TIMEOUT });
  await page.click('.editor-instance .monaco-editor .view-lines');
  await page.keyboard.down('Control');
  await page.keyboard.press('End');
  await page.keyboard.up('Control');
  await page.keyboard.sendCharacter('typed, not saved');
  await page.waitForSelector('.tabs-container .tab.dirty[aria-label*="dirty.txt"]', { timeout: UI_TIMEOUT });
  assert.equal(readFileSync(file, 'utf8'), EDIT_ORIGINAL, 'the typing is not saved');
  // pi's edit, asked for in the chat and allowed on its card.
  await setModel('script');
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  const agentLine = `line 2, edited by the agent ${tag}`;
  const prompt = JSON.stringify([['edit', { path: 'dirty.txt', edits: [{ oldText: 'line two', newText: agentLine }] }]]);
  await sendInChat(frame, prompt);
  await answerCard(frame, /dirty\.txt/);
  const turn = await waitForTurn(frame, prompt, "status !== 'running'", 'the edit to end');
  assert.equal(turn.status, 'completed', turn.text);
  assert.ok(turn.tools.some((t) => t.name === 'edit' && t.status === 'completed'), JSON.stringify(turn.tools));
  // Monaco draws spaces as no-break spaces.
  const shown = async (): Promise<string> =>
    ((await page.evaluate(`[...document.querySelectorAll('.editor-instance .monaco-editor .view-line')].map((l) => [l.style.top, l.textContent]).sort((a, b) => parseFloat(a[0]) - parseFloat(b[0])).map((x) => x[1]).join('\\n')`)) as string).replace(/\u00a0/g, ' ');
  await waitUntilAsync(async () => (await shown()).includes(agentLine), UI_TIMEOUT, 'the edit in the buffer');
  const text = await shown();
  assert.equal(text, `line one\n${agentLine}\nline three\ntyped, not saved`, 'the agent\'s line and the unsaved one, both in the buffer');
  assert.equal(readFileSync(file, 'utf8'), EDIT_ORIGINAL, 'nothing was written behind the buffer');
  await page.waitForSelector('.tabs-container .tab.dirty[aria-label*="dirty.txt"]', { timeout: UI_TIMEOUT });
  const shot = await screenshot('vscode-dirty-edit.png');
  cpSync(shot, join(repoRoot, 'docs/images/vscode-dirty-edit.png'));
  // Close it without saving (its tab's close button, then Don't Save), and put the settings back.
  await waitUntilAsync(() => Promise.resolve(backupsHold(agentLine)), UI_TIMEOUT, 'the hot-exit backup of the dirty buffer');
  await page.click('.tabs-container .tab[aria-label*="dirty.txt"] .tab-actions .action-label');
  const dontSave = await page.waitForSelector('.monaco-dialog-box .monaco-button::-p-text(Don\'t Save)', { visible: true, timeout: UI_TIMEOUT });
  await dontSave!.click();
  await page.waitForFunction(`!document.querySelector('.tabs-container .tab[aria-label*="dirty.txt"]')`, { timeout: UI_TIMEOUT });
  // VS Code drops the buffer's hot-exit backup after the close; a reload before that restores the
  // dirty buffer (seen once, in the next test's window).
  await waitUntilAsync(() => Promise.resolve(!backupsHold(agentLine)), UI_TIMEOUT, 'the backup of dirty.txt to be dropped');
  writeFileSync(settingsFile, original);
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  await page.waitForSelector('.statusbar-item[aria-label^="pi model:"]', { timeout: UI_TIMEOUT });
  assert.equal(readFileSync(file, 'utf8'), EDIT_ORIGINAL, 'nor after the buffer was closed unsaved');
  // The window may restore the file's editor after the reload; closed, it cannot take the focus
  // from the chat in the tests after this one.
  await runCommand('View: Close All Editors');
  await page.waitForFunction(`!document.querySelector('.tabs-container .tab[aria-label*="dirty.txt"]')`, { timeout: UI_TIMEOUT });
}));

/** Whether a hot-exit backup of the workbench (under the user-data dir) holds `text`. */
function backupsHold(text: string): boolean {
  const walk = (dir: string): boolean =>
    existsSync(dir) &&
    readdirSync(dir, { withFileTypes: true }).some((entry) =>
      entry.isDirectory() ? walk(join(dir, entry.name)) : readFileSync(join(dir, entry.name), 'utf8').includes(text),
    );
  return walk(join(tmp, 'user-data/User/Backups'));
}

const claudeBin = join(repoRoot, '.tools-claude/node_modules/.bin');

test('issue 38: Claude Code\'s plan shows above the composer and its subagent\'s calls fold under the Task card', { timeout: 5 * UI_TIMEOUT, skip: !existsSync(join(claudeBin, 'claude')) && 'no Claude Code in .tools-claude' }, () => step('plan-subagent', async () => {
  // The bridge's agent is the real Claude Code on the bridge's built-in scripted model, whose
  // `script` scenario makes the calls the prompt lists: tasks created and updated, then a Task
  // whose subagent reads a file.
  const settingsFile = join(tmp, 'user-data/User/settings.json');
  const original = readFileSync(settingsFile, 'utf8');
  const settings = JSON.parse(original) as Record<string, unknown>;
  delete settings['piBridge.pi.provider'];
  writeFileSync(
    settingsFile,
    JSON.stringify({
      ...settings,
      'piBridge.pi.model': 'script',
      // The checkout's bridge, whose scripted model is the one of this commit.
      'piBridge.bridge.command': bridgePython(),
      'piBridge.bridge.args': ['-m', 'bridge', '--agent', 'claude', '--scripted-model'],
      'piBridge.bridge.env': { PATH: `${claudeBin}:${userPath}`, PYTHONPATH: repoRoot },
    }, null, 2),
  );
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  await page.waitForSelector('.statusbar-item[aria-label="pi model: script"]', { timeout: UI_TIMEOUT });
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  await chatWait(frame, "document.querySelectorAll('section.turn').length === 0 && document.getElementById('plan').hidden");
  const workspace = join(tmp, 'workspace');
  writeFileSync(join(workspace, 'parser.txt'), `the parser divides by b ${tag}\n`);
  // Claude Code 2.1's task list (TaskCreate, TaskUpdate; it no longer offers TodoWrite) is the plan.
  const subjects = ['Read the parser', 'Guard the division', 'Add a test'];
  const tasks = [
    ...subjects.map((subject) => ['TaskCreate', { subject, description: subject, activeForm: subject }]),
    ['TaskUpdate', { taskId: '1', status: 'completed' }],
    ['TaskUpdate', { taskId: '2', status: 'in_progress' }],
  ];
  const inner = JSON.stringify([['Read', { file_path: join(workspace, 'parser.txt') }]]);
  const task = { description: 'Find the division', prompt: inner, subagent_type: 'general-purpose' };
  const prompt = JSON.stringify([...tasks, ['Task', task]]);
  await sendInChat(frame, prompt);
  const turn = await waitForTurn(frame, prompt, "status !== 'running'", 'the run to end');
  assert.equal(turn.status, 'completed', turn.text);
  assert.deepEqual(turn.tools.filter((t) => t.status !== 'completed'), [], 'every call succeeded');
  // The plan: pinned in the composer, above the input, each entry with its status.
  const plan = (await frame.evaluate(`(() => {
    const plan = document.getElementById('plan'), input = document.getElementById('prompt');
    return { hidden: plan.hidden, inComposer: plan.parentElement.id === 'composer',
      above: plan.getBoundingClientRect().bottom <= input.getBoundingClientRect().top,
      head: plan.querySelector('.plan-head').textContent,
      entries: [...plan.querySelectorAll('.plan-entry')].map((e) => [e.querySelector('.plan-text').textContent, e.dataset.status]) };
  })()`)) as { hidden: boolean; inComposer: boolean; above: boolean; head: string; entries: string[][] };
  assert.deepEqual(plan, {
    hidden: false, inComposer: true, above: true, head: 'Plan · 1/3 done',
    entries: [['Read the parser', 'completed'], ['Guard the division', 'in_progress'], ['Add a test', 'pending']],
  });
  // The subagent: its Read is a card inside the Task's card, in a closed group; not in the turn's own list.
  const folded = (await frame.evaluate(`(() => {
    const s = [...document.querySelectorAll('section.turn')].pop();
    const task = [...s.querySelectorAll('.tool')].find((t) => /^(Task|Agent)$/.test(t.querySelector('.tool-name').textContent));
    const group = task?.querySelector(':scope > details.subagent');
    const children = group ? [...group.querySelectorAll('.subagent-calls > .tool')] : [];
    return { task: !!task, open: group?.open ?? null, head: group?.querySelector('summary').textContent ?? '',
      children: children.map((c) => [c.querySelector('.tool-name').textContent, c.dataset.status, c.querySelector('pre.tool-output')?.textContent ?? '']),
      topLevel: [...s.querySelectorAll('.tool:not(.child)')].map((t) => t.querySelector('.tool-name').textContent) };
  })()`)) as { task: boolean; open: boolean | null; head: string; children: string[][]; topLevel: string[] };
  assert.ok(folded.task, JSON.stringify(folded));
  assert.equal(folded.open, false, 'the subagent is folded');
  assert.equal(folded.head, 'Subagent · 1 tool call');
  assert.equal(folded.children.length, 1, JSON.stringify(folded));
  assert.deepEqual(folded.children[0]!.slice(0, 2), ['Read', 'completed']);
  assert.match(folded.children[0]![2]!, new RegExp(`the parser divides by b ${tag}`));
  assert.ok(!folded.topLevel.includes('Read'), JSON.stringify(folded.topLevel));
  await screenshot('vscode-plan-subagent-folded.png');
  await frame.evaluate(`[...document.querySelectorAll('section.turn')].pop().querySelector('details.subagent').open = true`);
  await screenshot('vscode-plan-subagent-open.png');
  // Back to pi, and settled: the next test reloads the window again, which must not find this
  // reload's bridge still starting.
  const ready = (): number => extensionLog().split('bridge ready:').length - 1;
  const readyBefore = ready();
  writeFileSync(settingsFile, original);
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  await page.waitForSelector('.statusbar-item[aria-label^="pi model:"]', { timeout: UI_TIMEOUT });
  await waitUntilAsync(() => Promise.resolve(ready() > readyBefore), UI_TIMEOUT, 'the bridge on pi again');
  await runCommand('pi: New Conversation');
}));

/**
 * Make pi a new user's: an agent dir `agentDir` with no models.json and no key, no provider or
 * model picked. A reload activates the extension again with that, as when a new user opens VS Code;
 * no model is picked, so the status bar says the agent's default. Returns the settings.json it replaced.
 */
async function reloadAsNewUser(agentDir: string): Promise<string> {
  const settingsFile = join(tmp, 'user-data/User/settings.json');
  const original = readFileSync(settingsFile, 'utf8');
  mkdirSync(agentDir, { recursive: true });
  const settings = JSON.parse(original) as Record<string, unknown>;
  delete settings['piBridge.pi.provider'];
  delete settings['piBridge.pi.model'];
  // The doctor of each start names pi's configuration folder: one naming `agentDir` is a bridge
  // started with the new settings. The reloaded window may first start one with the old settings
  // (the server has not read the file yet) and restart it on the change: a prompt sent before
  // then would go to the bridge being stopped.
  const newStarts = (): number => extensionLog().split(`${agentDir})`).length - 1;
  const before = newStarts();
  writeFileSync(settingsFile, JSON.stringify({ ...settings, 'piBridge.bridge.env': { PI_BRIDGE_SCRIPTED_MODEL: '0', PI_CODING_AGENT_DIR: agentDir } }, null, 2));
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  await waitUntilAsync(() => Promise.resolve(newStarts() > before), UI_TIMEOUT, `a bridge started with pi's configuration in ${agentDir}`);
  await page.waitForSelector('.statusbar-item[aria-label="pi model: default"]', { timeout: UI_TIMEOUT });
  return original;
}

test('the first run without a provider: the chat says what is missing, its scripted-model button sets pi up, and the model dropdown lists the agent\'s models', { timeout: 5 * UI_TIMEOUT }, () => step('first-run', async () => {
  const settingsFile = join(tmp, 'user-data/User/settings.json');
  const original = await reloadAsNewUser(join(tmp, 'empty-agent'));
  try {
    await firstRun(settingsFile, original);
  } catch (err) {
    // The settings as they were, so that one failure here does not fail the tests after it.
    writeFileSync(settingsFile, original);
    await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT }).catch(() => undefined);
    throw err;
  }
}));

/** The first-run test's body, after `reloadAsNewUser` (`original`: the settings it replaced). */
async function firstRun(settingsFile: string, original: string): Promise<void> {
  const starts = (): number => extensionLog().split('bridge ready:').length - 1;
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  const prompt = `hello, first run ${tag}`;
  await sendInChat(frame, prompt);
  const failed = await waitForTurn(frame, prompt, "status === 'failed' && !!s.querySelector('.setup-card')", 'the failed first prompt with its setup card');
  // One failure, of kind auth (not busy), said once: the notice has the words, the summary the kind.
  assert.match(failed.text, /No API key found/);
  assert.equal(failed.text.split('No API key found').length - 1, 1, failed.text);
  assert.match(failed.text, /Failed \(auth\) · [\d.]+ s/);
  assert.doesNotMatch(failed.text, /busy/);
  const card = (await frame.evaluate(`(() => {
    const s = [...document.querySelectorAll('section.turn')].pop();
    const c = s.querySelector('.setup-card');
    return { text: c.innerText, buttons: [...c.querySelectorAll('button')].map((b) => b.textContent),
      links: [...s.querySelectorAll('.notice a')].map((a) => a.textContent),
      scrolls: document.scrollingElement.scrollWidth > document.scrollingElement.clientWidth };
  })()`)) as { text: string; buttons: string[]; links: string[]; scrolls: boolean };
  assert.match(card.text, /no API key/i);
  assert.deepEqual(card.buttons, ['Set a provider and key…', 'Try the scripted model', 'Open the doctor']);
  assert.ok(card.links.some((l) => l.endsWith('/docs/providers.md')), `the docs paths are links: ${JSON.stringify(card.links)}`);
  assert.equal(card.scrolls, false, 'the chat does not scroll sideways');
  await screenshot('firstrun-1-no-key.png');

  // The card's own button: the bridge restarts on the built-in scripted model, and a prompt runs.
  const beforeScripted = starts();
  await chatClick(frame, '.setup-card button[data-action="scripted"]');
  await waitUntilAsync(() => Promise.resolve(starts() > beforeScripted), UI_TIMEOUT, 'the bridge to restart on the scripted model');
  await runCommand('pi: New Conversation');
  const again = `hello again, scripted ${tag}`;
  await sendInChat(frame, again);
  const answered = await waitForTurn(frame, again, "status === 'completed'", 'the prompt answered by the scripted model');
  assert.ok(answered.assistant.trim().length > 0, 'the scripted model answered');
  // The header's dropdown: the agent's own models, the current one selected; the status bar names it.
  await chatWait(frame, "!document.getElementById('model').hidden && document.getElementById('model').options.length > 1 && document.getElementById('model').value !== ''");
  const dropdown = (await frame.evaluate(`(() => { const m = document.getElementById('model');
    return { value: m.value, options: [...m.options].map((o) => o.value) }; })()`)) as { value: string; options: string[] };
  assert.ok(dropdown.options.includes('scripted/echo') || dropdown.options.some((o) => o.endsWith('/echo')), JSON.stringify(dropdown));
  assert.ok(dropdown.options.includes(dropdown.value), JSON.stringify(dropdown));
  await page.waitForSelector(`.statusbar-item[aria-label="pi model: ${dropdown.value}"]`, { timeout: UI_TIMEOUT });
  await screenshot('firstrun-2-scripted-answered.png');
  // Picking in the dropdown is the next prompt's model: the echo model answers with the prompt.
  const echo = dropdown.options.find((o) => o.endsWith('/echo'))!;
  await frame.select('#model', echo);
  await page.waitForSelector('.statusbar-item[aria-label="pi model: echo"]', { timeout: UI_TIMEOUT });
  const third = `which model ${tag}`;
  await sendInChat(frame, third);
  const echoed = await waitForTurn(frame, third, "status === 'completed'", 'the echo model\'s answer');
  assert.match(echoed.assistant, new RegExp(`ECHO:.*${third}`));
  // The palette's one picker lists the same models, the current one first.
  await runCommand('pi: Pick Model…');
  await page.waitForFunction(
    `[...document.querySelectorAll('.quick-input-list .monaco-list-row')].some((r) => r.querySelector('.label-name')?.textContent === ${JSON.stringify(echo)} && /current/.test(r.textContent))`,
    { timeout: UI_TIMEOUT },
  );
  await screenshot('firstrun-3-model-picker.png');
  await page.keyboard.press('Escape');
  // The settings as they were (the model the earlier tests picked), for the tests after this one.
  writeFileSync(settingsFile, original);
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  const model = (JSON.parse(original) as Record<string, unknown>)['piBridge.pi.model'];
  await page.waitForSelector(`.statusbar-item[aria-label="pi model: ${typeof model === 'string' && model ? model : 'default'}"]`, { timeout: UI_TIMEOUT });
}

test("issue 35: a key set from the chat's setup card is kept in the secret storage, not the settings, and reaches the agent's environment", { timeout: 5 * UI_TIMEOUT }, () => step('secret-key', async () => {
  const settingsFile = join(tmp, 'user-data/User/settings.json');
  const original = await reloadAsNewUser(join(tmp, 'empty-agent-key'));
  // The first-run test chose the scripted model, which stays until it is forgotten: the command
  // forgets it and restarts the bridge without it.
  const ready = (): number => extensionLog().split('bridge ready:').length - 1;
  const readyBefore = ready();
  await runCommand('pi: Forget the First-Run Setup');
  await waitUntilAsync(() => Promise.resolve(ready() > readyBefore), UI_TIMEOUT, 'the bridge restarted without the first-run setup');
  await runCommand('pi: New Conversation');
  const frame = await chatFrame();
  const prompt = `no key yet ${tag}`;
  await sendInChat(frame, prompt);
  await waitForTurn(frame, prompt, "status === 'failed' && !!s.querySelector('.setup-card')", 'the setup card');
  const starts = (): number => extensionLog().split('bridge ready:').length - 1;
  const before = starts();
  await chatClick(frame, '.setup-card button[data-action="key"]');
  // The provider pick: another provider, whose key variable the user names.
  await page.waitForSelector('.quick-input-list .monaco-list-row[aria-label*="Another provider"]', { visible: true, timeout: UI_TIMEOUT });
  const pick = await page.waitForSelector('.quick-input-widget .quick-input-box input', { visible: true });
  await pick!.type('Another provider');
  await page.keyboard.press('Enter');
  await answerInputBox('pi: the variable pi reads the key from', 'CEREBRAS_API_KEY');
  const key = `sk-e2e-${tag}-secret`;
  await answerInputBox('pi: CEREBRAS_API_KEY', key);
  await waitUntilAsync(() => Promise.resolve(starts() > before), UI_TIMEOUT, 'the bridge to restart with the key');
  // The agent's process has it in its environment (read from /proc, not from what the bridge says).
  const again = `with a key ${tag}`;
  await sendInChat(frame, again);
  let seen = false;
  await waitUntilAsync(() => {
    for (const pid of processesMatching(PI_PROCESS)) {
      try {
        seen ||= readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`CEREBRAS_API_KEY=${key}`);
      } catch {
        // gone meanwhile
      }
    }
    return Promise.resolve(seen);
  }, UI_TIMEOUT, "pi with the key in its environment");
  await waitForTurn(frame, again, "status !== 'running'", 'the prompt with the key to end');
  // Never in the settings or the workbench's state files as plain text, nor in the extension's log.
  assert.ok(!readFileSync(settingsFile, 'utf8').includes(key), 'not in settings.json');
  assert.ok(!extensionLog().includes(key), "not in the extension's log");
  writeFileSync(settingsFile, original);
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
  await page.waitForSelector('.statusbar-item[aria-label^="pi model:"]', { timeout: UI_TIMEOUT });
}));

test('pi: Check Installation shows the doctor\'s report in the bridge log', { timeout: 3 * UI_TIMEOUT }, () => step('check-installation', async () => {
  // The activation check has logged one report per bridge start already: wait for one more.
  const reports = (): number => extensionLog().split('doctor: ok pi models:').length - 1;
  const before = reports();
  await runCommand('pi: Check Installation');
  await waitUntilAsync(() => Promise.resolve(reports() > before), UI_TIMEOUT, 'a new doctor report in the log');
  await page.waitForFunction(
    `[...document.querySelectorAll('.part.panel .view-lines')].some((el) => /doctor:.ok.pi.models:/.test(el.textContent))`,
    { timeout: UI_TIMEOUT },
  );
}));

/** Set the bridge's PATH to `path` alone in the user's settings and reload the window: the extension activates again with it. */
async function reloadWithBridgePath(path: string): Promise<void> {
  const settingsFile = join(tmp, 'user-data/User/settings.json');
  const settings = JSON.parse(readFileSync(settingsFile, 'utf8')) as Record<string, unknown>;
  writeFileSync(settingsFile, JSON.stringify({ ...settings, 'piBridge.bridge.env': { PATH: path } }, null, 2));
  await page.reload({ waitUntil: 'domcontentloaded', timeout: UI_TIMEOUT });
}

test('with pi gone from PATH, a notification offers Install pi, which runs the npm command in a terminal', { timeout: 3 * UI_TIMEOUT }, () => step('install-pi', async () => {
  // Only setting of the whole test: the bridge's PATH without pi. A reload of the window
  // activates the extension again with it, as when a user opens VS Code on a machine without pi.
  await reloadWithBridgePath(userPath.split(':').filter((dir) => !existsSync(join(dir, 'pi'))).join(':'));
  const install = await page.waitForSelector('.notification-toast .monaco-button::-p-text(Install pi)', {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  assert.ok(install);
  const toast = await page.$eval('.notification-toast', (el) => el.textContent ?? '');
  assert.match(toast, /pi is not installed/);
  assert.match(toast, /Open Docs/);
  await screenshot('04-install-pi-notification.png');
  // Toasts re-render as others arrive (the chat view's restore after the reload may add one), so
  // a click can land on a button being replaced and do nothing: while npm has not run and the
  // button is still there a few seconds after the last click, click the one found at that moment.
  // A click that took closes the toast, so npm is never asked twice.
  const npmRan = (): boolean =>
    existsSync(join(tmp, 'npm-calls')) && readFileSync(join(tmp, 'npm-calls'), 'utf8').includes('install');
  let lastClick = 0;
  await waitUntilAsync(async () => {
    if (npmRan()) {
      return true;
    }
    if (Date.now() - lastClick > 5000) {
      const button = await page.$('.notification-toast .monaco-button::-p-text(Install pi)');
      if (button !== null && (await button.click().then(() => true, () => false))) {
        lastClick = Date.now();
      }
    }
    return false;
  }, UI_TIMEOUT, 'a click on Install pi and the terminal to run npm');
  assert.equal(readFileSync(join(tmp, 'npm-calls'), 'utf8').trim(), 'install -g @earendil-works/pi-coding-agent@latest');
  await page.waitForSelector('.terminal-tabs-entry[aria-label*="Install pi"], .single-terminal-tab[aria-label*="Install pi"], [aria-label*="Install pi"]', {
    timeout: UI_TIMEOUT,
  });
  await screenshot('05-install-pi-terminal.png');
}));

test('without a Python >= 3.11 on the bridge PATH, a notification says so and names the setting', { timeout: 3 * UI_TIMEOUT }, () => step('no-python', async () => {
  const noPython = join(tmp, 'bin-without-python');
  mkdirSync(noPython);
  for (const name of ['node', 'pi']) {
    symlinkSync(join(tmp, 'bin', name), join(noPython, name));
  }
  await reloadWithBridgePath(noPython);
  const toast = await page.waitForSelector('.notification-toast ::-p-text(needs Python 3.11 or newer)', {
    visible: true,
    timeout: UI_TIMEOUT,
  });
  assert.ok(toast);
  const text = await page.$eval('.notification-toast', (el) => el.textContent ?? '');
  assert.match(text, /python3 \(PATH\) is not found or does not run/);
  assert.match(text, /piBridge\.bridge\.command/);
  await page.waitForSelector('.notification-toast .monaco-button::-p-text(Open Settings)', { visible: true });
  await screenshot('06-no-python-notification.png');
}));
