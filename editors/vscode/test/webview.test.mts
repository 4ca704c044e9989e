/**
 * The chat's one renderer in a real browser: the page of chat/page.ts with the bundled
 * webview/main.ts and media/chat.css in headless Chromium, fed the host messages of real
 * conversations on the real bridge (real pi, the scripted model). What the user would see is read
 * from the DOM, and every wait has a timeout.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { build } from 'esbuild';
import { CancellationTokenSource } from 'vscode-jsonrpc';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import type { ApprovalView, HostMessage } from '../src/chat/chatProtocol.js';
import { Conversations } from '../src/chat/conversation/conversations.js';
import type { ConversationMemory, RememberedConversation } from '../src/chat/conversation/conversation.js';
import { chatPage } from '../src/chat/page.js';
import type { RunParams } from '../src/bridge/protocol.js';
import { Session } from '../src/bridge/session.js';
import { fakePiCommand, processesMatching, startBridge, waitUntil, withTimeout, type Bridge } from './harness.js';

const extensionDir = resolve(fileURLToPath(new URL('.', import.meta.url)), '../..');
const chromium = process.env['CHROMIUM'] ?? '/usr/bin/chromium';
const ORIGIN = 'http://chat.test';
const RUN_TIMEOUT = 60_000;
const UI_TIMEOUT = 20_000;

let bridge: Bridge;
let session: Session;
let browser: Browser;

before(async () => {
  assert.ok(existsSync(chromium), `chromium at ${chromium} (ci.sh installs it; or set CHROMIUM)`);
  bridge = await startBridge();
  session = new Session(bridge.rpc);
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  await browser?.close();
  session?.dispose();
  const code = await bridge.close();
  assert.equal(code, 0, `bridge exit code; stderr:\n${bridge.stderr().slice(-4000)}`);
  assert.deepEqual(processesMatching(/./), [], 'no process of this test outlives the bridge');
});

let script: string | undefined;

/** The webview's script as the extension bundles it (scripts/build.mjs), built once. */
async function webviewScript(): Promise<string> {
  if (script === undefined) {
    const out = await build({
      entryPoints: [join(extensionDir, 'src/chat/webview/main.ts')],
      bundle: true,
      write: false,
      format: 'iife',
      platform: 'browser',
      target: 'es2022',
      logLevel: 'warning',
    });
    script = out.outputFiles[0]!.text;
  }
  return script;
}

/** A fresh chat page, and a way to post host messages to it in order. */
interface ChatView {
  page: Page;
  /** Post like the extension host does (in order; `flush` waits until all arrived). */
  post(message: HostMessage): void;
  flush(): Promise<void>;
  /** Wait until `expression` holds in the page. */
  until(expression: string, what: string): Promise<void>;
  /** The value of `expression` in the page. */
  read<T>(expression: string): Promise<T>;
  /** Close the page: a disposed webview, where the host's late messages go nowhere. */
  close(): Promise<void>;
}

async function openChat(): Promise<ChatView> {
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  const files: Record<string, { type: string; body: string }> = {
    '/index.html': {
      type: 'text/html',
      body: chatPage({
        cspSource: ORIGIN,
        nonce: 'testnonce',
        styleUri: `${ORIGIN}/chat.css`,
        scriptUri: `${ORIGIN}/webview.js`,
      }),
    },
    '/chat.css': { type: 'text/css', body: readFileSync(join(extensionDir, 'media/chat.css'), 'utf8') },
    '/webview.js': { type: 'text/javascript', body: await webviewScript() },
  };
  await page.setRequestInterception(true);
  page.on('request', (request) => {
    const file = request.url().startsWith(ORIGIN) ? files[new URL(request.url()).pathname] : undefined;
    void (file ? request.respond({ status: 200, contentType: file.type, body: file.body }) : request.abort());
  });
  // What acquireVsCodeApi gives a webview: messages to the host are kept for the test to read.
  await page.evaluateOnNewDocument(`
    window.__toHost = [];
    window.acquireVsCodeApi = () => ({
      postMessage: (m) => window.__toHost.push(m),
      getState: () => window.__state,
      setState: (s) => { window.__state = s; },
    });`);
  await page.goto(`${ORIGIN}/index.html`, { waitUntil: 'load', timeout: UI_TIMEOUT });
  let chain = Promise.resolve();
  let closing = false;
  const view: ChatView = {
    page,
    post(message) {
      chain = chain.then(async () => {
        // A closed page is a disposed webview: the host's late messages (a command list that
        // arrives after the test) go nowhere, as VS Code drops them. One sent as the test
        // closes the page fails with "Target closed" before the page counts as closed.
        if (closing || page.isClosed()) {
          return;
        }
        await page.evaluate(`window.postMessage(${JSON.stringify(message)}, '*')`).catch((err: unknown) => {
          if (!closing && !page.isClosed() && !String(err).includes('detached Frame')) {
            throw err;
          }
        });
      });
    },
    flush: () => chain,
    async until(expression, what) {
      await withTimeout(
        page.waitForFunction(expression, { polling: 'mutation', timeout: UI_TIMEOUT }).then(() => undefined),
        UI_TIMEOUT + 1000,
        `${what} (page errors: ${errors.join('; ') || 'none'})`,
      );
    },
    read: <T,>(expression: string) => page.evaluate(expression) as Promise<T>,
    async close() {
      closing = true;
      await page.close();
    },
  };
  await view.until("window.__toHost.some((m) => m.type === 'ready')", 'the page to say ready');
  return view;
}

/** Conversations as the chat view holds them, posting into `view`; runs use `params`. */
function conversationsOn(view: ChatView, params: Partial<RunParams>): Conversations {
  return new Conversations({
    session: () => Promise.resolve(session),
    runParams: (prompt, runId) => ({ prompt, runId, ...params }),
    post: (message) => view.post(message),
  });
}

test('live thought fragments show as one Thought, as the Runs view showed them', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, { model: 'thinking', liveThoughts: true });
  conversations.current.replay();
  await withTimeout(conversations.current.send('Think first, then answer'), RUN_TIMEOUT, 'the thinking turn');
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'completed'", 'the ended turn');
  const thoughts = await view.read<{ summary: string; text: string }[]>(
    `[...document.querySelectorAll('details.thought')].map((d) => ({
       summary: d.querySelector('summary').textContent, text: d.querySelector('.markdown').textContent }))`,
  );
  const fragments = bridge.messages.all.filter((m) => m.type === 'assistant.thought' && m.content.live === true);
  assert.ok(fragments.length > 1, `the thought came in fragments (${fragments.length})`);
  assert.equal(thoughts.length, 1, `one Thought block: ${JSON.stringify(thoughts)}`);
  const whole = fragments.map((m) => (m.type === 'assistant.thought' ? m.content.text : '')).join('');
  assert.equal(thoughts[0]!.text.trim(), whole.trim(), 'the block holds every fragment');
  await view.close();
});

/** The ended turn `index` of the page, as the user sees it. */
interface ShownTurn {
  status: string;
  /** The footer's words (a user's), and the receipt it opens (the bridge's account). */
  footer: string;
  receipt: string;
  assistant: string;
  kinds: string[];
  thoughts: { open: boolean; summary: string }[];
  tools: { status: string; name: string; command: string; output: string; error: string; notes: string }[];
  notices: { classes: string; text: string }[];
}

async function shownTurn(view: ChatView, index = 0): Promise<ShownTurn> {
  return view.read<ShownTurn>(`(() => {
    const s = document.querySelectorAll('section.turn')[${index}];
    const answer = s.querySelector('.answer');
    return {
      status: s.dataset.status,
      footer: s.querySelector('.turn-status .turn-summary')?.textContent ?? '',
      receipt: s.querySelector('.turn-status .turn-receipt code')?.textContent ?? '',
      assistant: [...s.querySelectorAll('.assistant')].map((a) => a.textContent).join(' '),
      kinds: [...answer.children].map((c) => c.classList[0]),
      thoughts: [...s.querySelectorAll('details.thought')].map((d) => ({ open: d.open, summary: d.querySelector('summary').textContent })),
      tools: [...s.querySelectorAll('.tool')].map((t) => ({
        status: t.dataset.status, name: t.querySelector('.tool-name').textContent,
        command: t.querySelector('.tool-command').textContent,
        output: t.querySelector('pre.tool-output')?.textContent ?? '',
        error: t.querySelector('pre.tool-error')?.textContent ?? '',
        notes: [...t.querySelectorAll('.note')].map((n) => n.textContent).join(' ') })),
      notices: [...s.querySelectorAll('.notice')].map((n) => ({ classes: n.className, text: n.textContent })),
    };
  })()`);
}

/** Send `prompt` in a fresh chat page on `model`, and wait until its turn has ended. */
async function endedTurn(params: Partial<RunParams>, prompt: string): Promise<ShownTurn> {
  const view = await openChat();
  const conversations = conversationsOn(view, params);
  conversations.current.replay();
  await withTimeout(conversations.current.send(prompt), RUN_TIMEOUT, `the turn "${prompt}"`);
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status !== 'running'", 'the ended turn');
  const turn = await shownTurn(view);
  await view.close();
  return turn;
}

test('a tool run shows its card (command, status, output) and its final state with usage', { timeout: RUN_TIMEOUT }, async () => {
  const turn = await endedTurn({ model: 'tool' }, 'Run echo hi');
  assert.equal(turn.status, 'completed');
  assert.deepEqual(turn.kinds, ['assistant', 'tool', 'assistant'], JSON.stringify(turn));
  const [tool] = turn.tools;
  assert.ok(tool, 'a tool card');
  assert.equal(tool.status, 'completed');
  assert.equal(tool.name, 'bash');
  assert.equal(tool.command, 'echo hi');
  assert.match(tool.output, /hi/);
  assert.ok(turn.assistant.trim().length > 0, 'the answer is shown');
  assert.match(turn.footer, /^Done · \d+\.\d s · [\d,]+ tokens$/, turn.footer);
  assert.match(turn.receipt, /^completed · stop: \w+ · \d+ in · \d+ out · .*\d+ tokens · \d+\.\d s$/, turn.receipt);
});

test('a buffered thought shows closed, before the text of its message', { timeout: RUN_TIMEOUT }, async () => {
  const turn = await endedTurn({ model: 'thinking' }, 'Think first, then answer');
  assert.equal(turn.status, 'completed');
  assert.deepEqual(turn.kinds, ['thought', 'assistant'], JSON.stringify(turn));
  assert.deepEqual(turn.thoughts, [{ open: false, summary: 'Thought' }]);
});

test('output pi truncated says so, and where the full output is', { timeout: RUN_TIMEOUT }, async () => {
  const turn = await endedTurn({ model: 'toolbig' }, 'Print a lot');
  assert.equal(turn.tools[0]?.status, 'completed', JSON.stringify(turn));
  assert.match(turn.tools[0]?.notes ?? '', /^output truncated; full output in \S+/);
});

test('a retried run shows each failed attempt, the retry notes, and its attempt in the footer', { timeout: RUN_TIMEOUT }, async () => {
  const turn = await endedTurn(
    { model: 'flaky', retry: { maxAttempts: 3, initialDelayMs: 10, maxDelayMs: 50 } },
    'Answer after two failures',
  );
  assert.equal(turn.status, 'completed', JSON.stringify(turn));
  const retries = turn.notices.filter((n) => /\bwarning\b/.test(n.classes)).map((n) => n.text);
  assert.equal(retries.length, 2, JSON.stringify(turn.notices));
  assert.match(retries[0]!, /^retrying \(attempt 2\) in \d+ ms: /);
  assert.match(retries[1]!, /^retrying \(attempt 3\) in \d+ ms: /);
  assert.equal(turn.notices.filter((n) => /\berror\b/.test(n.classes)).length, 2, 'each failed attempt says why');
  assert.match(turn.footer, /^Done · after 3 attempts · /, turn.footer);
  assert.match(turn.receipt, /^completed · attempt 3 · stop: \w+ · /, turn.receipt);
});

test('Stop mid-tool shows the tool cancelled, the text so far and the shutdown receipt', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, { model: 'toolslow' });
  conversations.current.replay();
  const run = conversations.current.send('Sleep a while');
  await view.until(`document.querySelector('.tool')?.dataset.status === 'running'`, 'the running tool');
  await conversations.current.stop();
  await withTimeout(run, RUN_TIMEOUT, 'the stopped turn');
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'cancelled'", 'the stopped turn');
  const turn = await shownTurn(view);
  assert.equal(turn.tools[0]?.status, 'cancelled', JSON.stringify(turn));
  assert.match(turn.footer, /^Stopped · \d+\.\d s\b/, turn.footer);
  assert.doesNotMatch(turn.footer, /interrupted|survivor|nothing was running|kept for/);
  assert.match(
    turn.receipt,
    /^cancelled · stopped \((exited|interrupted|killed)\) in \d+ ms · (\d+ process(es)? ended \([\d, ]+\)|nothing was running)/,
    turn.receipt,
  );
  await view.close();
});

test('Stop puts the unsent steer and the queued message back in the composer, ahead of the draft', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, { model: 'slow' });
  conversations.current.replay();
  const run = conversations.current.send('Divide these numbers');
  await view.until("document.querySelector('.assistant')?.textContent.length > 0", 'the first delta');
  await conversations.current.send('Focus on division by zero only');
  await conversations.current.send('Then add tests', true);
  await view.flush();
  await view.until("document.querySelectorAll('#queued li').length === 1", 'the queued message shown');
  await view.page.evaluate(`document.getElementById('prompt').value = 'my draft'`);
  await conversations.current.stop();
  await withTimeout(run, RUN_TIMEOUT, 'the stopped turn');
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'cancelled'", 'the stopped turn');
  const composer = await view.read<string>("document.getElementById('prompt').value");
  assert.equal(composer, 'Focus on division by zero only\n\nThen add tests\n\nmy draft');
  assert.equal(await view.read<number>("document.querySelectorAll('#queued li').length"), 0, 'nothing left queued');
  await view.close();
});

test('model output, a prompt and a tool name cannot inject markup', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const prompt = '<img src=x onerror="window.__injected = 1">';
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt, chips: ['<b>chip</b>'], live: true } });
  const entries: HostMessage[] = [
    { type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: { type: 'assistant', content: { text: '<script>window.__injected = 2</script> and <b>bold</b>' } } } },
    { type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: { type: 'assistant.thought', content: { text: '<img src=x onerror="window.__injected = 3">' } } } },
    { type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: { type: 'tool.call', content: { toolCallId: 'c1', name: '<x>', arguments: { command: '"><script>window.__injected = 4</script>' } } } } },
    { type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: { type: 'tool.failed', content: { toolCallId: 'c1', name: '<x>', error: '<b>no</b>' } } } },
  ];
  for (const message of entries) {
    view.post(message);
  }
  view.post({ type: 'turnEnded', payload: { turnId: 't1', status: 'failed', summary: '<i>failed</i>' } });
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'failed'", 'the ended turn');
  assert.equal(await view.read<number>("document.querySelectorAll('#thread script, #thread img, #thread b, #thread i').length"), 0);
  assert.equal(await view.read<unknown>('window.__injected ?? null'), null, 'no injected script ran');
  assert.equal(await view.read<string>("document.querySelector('.prompt-text').textContent"), prompt, 'the prompt shows as text');
  const turn = await shownTurn(view);
  assert.match(turn.assistant, /<script>window.__injected = 2<\/script> and <b>bold<\/b>/, 'the answer shows as text');
  assert.equal(turn.tools[0]?.name, '<x>');
  assert.equal(turn.tools[0]?.error, '<b>no</b>');
  assert.equal(turn.footer, '<i>failed</i>');
  await view.close();
});

test('a pi that crashes mid-tool shows a failed turn: the tool failed, the error, the failure in the footer', { timeout: 2 * RUN_TIMEOUT }, async () => {
  const fake = await startBridge({ scriptedModel: false, initializationOptions: { piCommand: fakePiCommand() } });
  const fakeSession = new Session(fake.rpc);
  try {
    const view = await openChat();
    const conversations = new Conversations({
      session: () => Promise.resolve(fakeSession),
      runParams: (prompt, runId) => ({ prompt, runId, model: 'crash_tool' }),
      post: (message) => view.post(message),
    });
    conversations.current.replay();
    await withTimeout(conversations.current.send('build it'), RUN_TIMEOUT, 'the crash_tool turn');
    await view.flush();
    await view.until("document.querySelector('section.turn')?.dataset.status === 'failed'", 'the failed turn');
    const turn = await shownTurn(view);
    assert.equal(turn.tools[0]?.status, 'failed', JSON.stringify(turn));
    assert.match(turn.assistant, /Running it now/);
    assert.ok(turn.notices.some((n) => /\berror\b/.test(n.classes)), `an error notice: ${JSON.stringify(turn.notices)}`);
    // The error's words are in its notice; the footer names only its kind, so they are not said twice.
    assert.match(turn.footer, /^Failed \(\w+\) · \d+\.\d s$/, turn.footer);
    assert.match(turn.receipt, /^failed · \w+: .+ · \d+\.\d s$/, turn.receipt);
    await view.close();
  } finally {
    fakeSession.dispose();
    const code = await fake.close();
    assert.equal(code, 0, `fake-pi bridge exit code; stderr:\n${fake.stderr().slice(-4000)}`);
  }
});

test('a one-shot prompt is the first turn of a new conversation, takes the waiting chips, and its token cancels it', { timeout: 2 * RUN_TIMEOUT }, async () => {
  const view = await openChat();
  let model = 'echo';
  const conversations = new Conversations({
    session: () => Promise.resolve(session),
    runParams: (prompt, runId) => ({ prompt, runId, model }),
    post: (message) => view.post(message),
  });
  const empty = conversations.current;
  assert.equal(conversations.forOneShot(), empty, 'an empty conversation takes the one-shot itself');
  empty.replay();
  await withTimeout(empty.send('an earlier turn'), RUN_TIMEOUT, 'the earlier turn');
  empty.addChip({ kind: 'file', path: 'notes.txt', languageId: 'plaintext', text: 'the notes' });

  const oneShot = conversations.forOneShot();
  assert.notEqual(oneShot, empty, 'a conversation with turns is left for a new one');
  oneShot.replay();
  const record = await withTimeout(oneShot.ask('What is in it?'), RUN_TIMEOUT, 'the one-shot');
  assert.equal(record?.status, 'completed', JSON.stringify(record));
  assert.ok(oneShot.sessionId && oneShot.sessionId !== empty.sessionId, 'a session of its own');
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'completed'", 'the one-shot turn');
  assert.equal(await view.read<number>("document.querySelectorAll('section.turn').length"), 1, 'only the one-shot turn is shown');
  const turn = await shownTurn(view);
  assert.match(turn.assistant, /ECHO:What is in it\?/);
  assert.match(turn.assistant, /notes\.txt/, 'the chip went with the one-shot');
  assert.equal(await view.read<number>("document.querySelectorAll('#chips .chip').length"), 0);

  model = 'slow';
  const next = conversations.forOneShot();
  next.replay();
  const cancel = new CancellationTokenSource();
  const slow = next.ask('a story to cancel', { token: cancel.token });
  await view.until("!!document.querySelector('section.turn .assistant')", 'the slow one-shot streaming');
  cancel.cancel();
  const cancelled = await withTimeout(slow, RUN_TIMEOUT, 'the cancelled one-shot');
  assert.equal(cancelled?.status, 'cancelled');
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'cancelled'", 'the cancelled turn');
  assert.match((await shownTurn(view)).footer, /^Stopped · /);
  assert.match((await shownTurn(view)).receipt, /^cancelled · stopped \(/);
  await view.close();
});

test('pi: Cancel Current Run stops the run that started last, shown or not', { timeout: 2 * RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, { model: 'slow' });
  conversations.current.replay();
  const first = conversations.current;
  const firstRun = first.send('the older run');
  await view.until("!!document.querySelector('section.turn .assistant')", 'the first run streaming');
  const second = conversations.forOneShot();
  second.replay();
  const secondRun = second.ask('the newer run');
  await view.until("!!document.querySelector('section.turn .assistant')", 'the second run streaming');
  assert.equal(conversations.runningCount, 2);
  assert.equal(conversations.stopNewest(), true);
  assert.equal((await withTimeout(secondRun, RUN_TIMEOUT, 'the newer run'))?.status, 'cancelled');
  assert.equal(first.running, true, 'the older run goes on');
  assert.equal(conversations.stopNewest(), true, 'then the older one, unseen');
  await withTimeout(firstRun, RUN_TIMEOUT, 'the older run');
  assert.equal(conversations.runningCount, 0);
  assert.equal(conversations.stopNewest(), false, 'nothing left to stop');
  await view.close();
});

test('a conversation replaced while its run goes no longer reaches the view', { timeout: 2 * RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, { model: 'slow' });
  conversations.current.replay();
  const first = conversations.current;
  const firstRun = first.send('a long story that is left running');
  await view.until("!!document.querySelector('section.turn .assistant')", 'the first conversation streaming');
  // pi: New Conversation while it runs, and a prompt in the new one.
  const second = conversations.replace();
  second.replay();
  const secondRun = second.send('another long story');
  await view.until(
    "document.querySelectorAll('section.turn').length === 1 && !!document.querySelector('section.turn .assistant')",
    'the second conversation streaming',
  );
  await view.until(`!!document.querySelector('#send[data-action="stop"]')`, 'the Stop button of the second run');
  // The first conversation's run ends while the second one goes.
  await first.stop();
  await withTimeout(firstRun, RUN_TIMEOUT, 'the first run to end');
  await view.flush();
  assert.equal(second.running, true, 'the second run still goes');
  assert.equal(
    await view.read<string>("document.getElementById('send').dataset.action"),
    'stop',
    'the button still stops the second run',
  );
  assert.equal(
    await view.read<string>("document.getElementById('live').textContent"),
    '',
    'nothing announced of a conversation the view does not show',
  );
  await second.stop();
  await withTimeout(secondRun, RUN_TIMEOUT, 'the second run to end');
  await view.flush();
  await view.until(`document.querySelector('section.turn')?.dataset.status === 'cancelled'`, 'the second turn stopped');
  await view.until(`!!document.querySelector('#send[data-action="send"]')`, 'the Send button again');
  await view.close();
});

test('opening the session of a conversation that runs unseen shows it live, Stop included', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, { model: 'slow' });
  conversations.current.replay();
  const first = conversations.current;
  const run = first.send('a story to come back to');
  await view.until("!!document.querySelector('section.turn .assistant')", 'the conversation streaming');
  const sessionId = first.sessionId;
  assert.ok(sessionId, 'the running conversation has its session');
  conversations.replace().replay();
  await view.until("document.querySelectorAll('section.turn').length === 0", 'the new, empty conversation');
  assert.equal(await conversations.open(sessionId), true);
  assert.equal(conversations.current, first, 'the live conversation itself, not a copy from its history');
  await view.until(
    `document.querySelector('section.turn')?.dataset.status === 'running' && !!document.querySelector('#send[data-action="stop"]')`,
    'the running turn with its Stop',
  );
  const shown = await view.read<string>("document.querySelector('section.turn .assistant').textContent");
  await view.until(
    `document.querySelector('section.turn .assistant').textContent.length > ${shown.length}`,
    'the answer streaming on in the view',
  );
  await first.stop();
  await withTimeout(run, RUN_TIMEOUT, 'the run to end');
  await view.flush();
  await view.until(`document.querySelector('section.turn')?.dataset.status === 'cancelled'`, 'the turn stopped');
  await view.close();
});

test('an approval card: focused when it appears unless a message is being typed, Enter allows, Escape denies with the reason, markup stays text, settled it takes no answer', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt: 'go', chips: [], live: true } });
  const options = [
    { optionId: 'allow', kind: 'allow_once', name: 'Allow' },
    { optionId: 'always', kind: 'allow_always', name: 'Always allow `rm` in this workspace' },
    { optionId: 'deny', kind: 'reject_once', name: 'Deny' },
  ] as const;
  const card = (key: string, command: string): HostMessage => ({
    type: 'approval',
    payload: {
      key, turnId: 't1', tool: 'bash', kind: 'execute', title: command, command, diff: null,
      options: [...options], state: 'pending', outcome: null, decision: null,
    },
  });
  const answers = "window.__toHost.filter((m) => m.type === 'answerApproval').map((m) => m.payload)";
  view.post(card('t1/c1', '<img src=x onerror="window.__injected = 5">'));
  await view.flush();
  await view.until("document.activeElement === document.querySelector('.approval[data-key=\"t1/c1\"]')", 'the card to take the focus');
  assert.equal(await view.read<string>('document.querySelector(".approval-command").textContent'), '<img src=x onerror="window.__injected = 5">');
  assert.equal(await view.read<number>("document.querySelectorAll('.approval img').length"), 0, 'the command shows as text');
  assert.deepEqual(
    await view.read<string[]>("[...document.querySelectorAll('.approval button.approval-option')].map((b) => b.textContent)"),
    ['Allow', 'Always allow `rm` in this workspace', 'Deny'],
    'one real button per option offered',
  );
  await view.page.keyboard.press('Enter');
  await view.until(`${answers}.length === 1`, 'Enter to answer');
  assert.deepEqual(await view.read<unknown>(answers), [{ key: 't1/c1', optionId: 'allow', message: null }]);
  view.post({ type: 'approval', payload: { ...(card('t1/c1', 'x').payload as ApprovalView), state: 'answered', outcome: 'Allowed', decision: 'allow' } });

  // Someone typing a message keeps the focus; in the card, a reason and Escape deny with it.
  await view.page.focus('#prompt');
  await view.page.keyboard.type('half a message');
  view.post(card('t1/c2', 'rm -rf build'));
  await view.flush();
  await view.until("!!document.querySelector('.approval[data-key=\"t1/c2\"]')", 'the second card');
  assert.equal(await view.read<string>('document.activeElement.id'), 'prompt', 'the input kept the focus');
  await view.page.focus('.approval[data-key="t1/c2"] .approval-reason');
  await view.page.keyboard.type('use make clean');
  await view.page.keyboard.press('Escape');
  await view.until(`${answers}.length === 2`, 'Escape to answer');
  assert.deepEqual((await view.read<unknown[]>(answers))[1], { key: 't1/c2', optionId: 'deny', message: 'use make clean' });

  // Withdrawn by the bridge: cancelled, and nothing in it answers any more.
  view.post({ type: 'approval', payload: { ...(card('t1/c2', 'x').payload as ApprovalView), state: 'cancelled', outcome: 'cancelled' } });
  await view.flush();
  await view.until("document.querySelector('.approval[data-key=\"t1/c2\"]').dataset.state === 'cancelled'", 'the cancelled card');
  assert.ok(await view.read<boolean>("[...document.querySelectorAll('.approval[data-key=\"t1/c2\"] button.approval-option, .approval[data-key=\"t1/c2\"] input')].every((b) => b.disabled)"));
  await view.page.evaluate("document.querySelector('.approval[data-key=\"t1/c2\"]').focus()");
  await view.page.keyboard.press('Enter');
  await view.page.evaluate("document.querySelector('.approval[data-key=\"t1/c2\"] button.approval-option').click()");
  assert.equal((await view.read<unknown[]>(answers)).length, 2, 'a settled card sends nothing');
  assert.equal(await view.read<string>("document.querySelector('.approval[data-key=\"t1/c2\"] .approval-outcome').textContent"), 'cancelled');
  assert.equal(await view.read<unknown>('window.__injected ?? null'), null);
  await view.close();
});

test("`/` in the input lists the conversation's commands from pi/commands: filtered as typed, arrows pick, Tab takes, Escape closes, a full `/new` sends", { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  const conversations = conversationsOn(view, {});
  conversations.current.replay(); // a new conversation fetches the workspace's commands
  await view.flush();
  const rows = "[...document.querySelectorAll('#commands li')].map((li) => li.dataset.name)";
  await view.page.focus('#prompt');
  await view.page.keyboard.type('/');
  await view.until("!document.getElementById('commands').hidden", 'the popup after /');
  const all = await view.read<string[]>(rows);
  for (const name of ['compact', 'autocompact', 'name', 'export', 'new']) {
    assert.ok(all.includes(name), `/${name} is listed: ${JSON.stringify(all)}`);
  }
  const compactRow = await view.read<string>(
    "document.querySelector('#commands li[data-name=\"compact\"]').textContent",
  );
  assert.match(compactRow, /^\/compact\[instructions\].+bridge$/, 'name, argument hint, description, source');
  assert.equal(await view.read<string>("document.getElementById('prompt').getAttribute('aria-expanded')"), 'true');

  await view.page.keyboard.type('comp');
  await view.until(`JSON.stringify(${rows}) === JSON.stringify(['compact', 'autocompact'])`, 'starts-with first, then contains');
  await view.page.keyboard.press('ArrowDown');
  await view.until("document.querySelector('#commands li[aria-selected=\"true\"]').dataset.name === 'autocompact'", 'ArrowDown');
  assert.equal(
    await view.read<string>("document.getElementById('prompt').getAttribute('aria-activedescendant')"),
    'command-1',
  );
  await view.page.keyboard.press('Tab');
  await view.until("document.getElementById('prompt').value === '/autocompact ' && document.getElementById('commands').hidden", 'Tab takes it');
  await view.page.keyboard.type('off');
  assert.equal(await view.read<boolean>("document.getElementById('commands').hidden"), true, 'no popup on the arguments');

  // Escape closes it until the text changes; a prompt that does not start with / shows none.
  await view.page.evaluate("document.getElementById('prompt').value = ''");
  await view.page.keyboard.type('/na');
  await view.until("!document.getElementById('commands').hidden", 'the popup for /na');
  await view.page.keyboard.press('Escape');
  await view.until("document.getElementById('commands').hidden", 'Escape closes it');
  await view.page.evaluate("document.getElementById('prompt').value = ''");
  await view.page.keyboard.type('fix /comp');
  assert.equal(await view.read<boolean>("document.getElementById('commands').hidden"), true, 'not mid-prompt');

  // `/new` typed in full takes no arguments: Enter sends it rather than completing it.
  await view.page.evaluate("document.getElementById('prompt').value = ''");
  await view.page.keyboard.type('/new');
  await view.until("!document.getElementById('commands').hidden", 'the popup for /new');
  await view.page.keyboard.press('Enter');
  await view.until("window.__toHost.some((m) => m.type === 'send' && m.payload.text === '/new')", 'Enter sends /new');
  await view.close();
});

test('an approval card waits inside its tool card ("waiting for you"), with even buttons; answered it folds in place to its answer, ✓ or ✗', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt: 'edit it', chips: [], live: true } });
  const call = (id: string): HostMessage => ({
    type: 'entry',
    payload: { turnId: 't1', attempt: 1, stat: null, entry: { type: 'tool.call', content: { toolCallId: id, name: 'write', arguments: { path: `/w/${id}.txt` } } } },
  });
  const options = [
    { optionId: 'allow', kind: 'allow_once', name: 'Allow' },
    { optionId: 'always', kind: 'allow_always', name: 'Always allow write in this workspace' },
    { optionId: 'deny', kind: 'reject_once', name: 'Deny' },
    { optionId: 'never', kind: 'reject_always', name: 'Always deny' },
  ] as const;
  const approval = (id: string, change: Partial<ApprovalView> = {}): HostMessage => ({
    type: 'approval',
    payload: {
      key: `t1/${id}`, turnId: 't1', tool: 'write', kind: 'edit', title: `write /w/${id}.txt`, command: null,
      diff: { path: `/w/${id}.txt`, lines: [{ op: '+', text: 'one' }, { op: '+', text: 'two' }], hidden: 0, added: 2, removed: 0, canOpen: true, note: 'a new file' },
      options: [...options], state: 'pending', outcome: null, decision: null, ...change,
    },
  });
  const card = (id: string): string => `document.querySelector('.approval[data-key="t1/${id}"]')`;
  const toolState = (id: string): string => `document.querySelector('.tool[data-tool-call-id="${id}"] .tool-state').textContent`;
  view.post(call('c1'));
  view.post(approval('c1'));
  await view.flush();
  await view.until(`${toolState('c1')} === 'waiting for you'`, 'the tool card to say it waits');
  assert.equal(await view.read<boolean>(`${card('c1')}.parentElement.matches('.tool[data-tool-call-id="c1"]')`), true, 'the card is in its tool card');
  const widths = await view.read<number[]>(`[...${card('c1')}.querySelectorAll('button.approval-option')].map((b) => Math.round(b.getBoundingClientRect().width))`);
  assert.equal(widths.length, 4);
  assert.ok(Math.max(...widths) - Math.min(...widths) <= 1, `even buttons: ${JSON.stringify(widths)}`);

  // Allowed: the tool runs again ("running"), the card folds to ✓ and its answer, no diff repeated.
  view.post(approval('c1', { state: 'answered', outcome: 'Allowed', decision: 'allow' }));
  view.post({ type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: { type: 'assistant', content: { text: 'Wrote it.' } } } });
  await view.flush();
  await view.until(`${toolState('c1')} === 'running'`, 'the tool to run once allowed');
  assert.equal(await view.read<string>(`${card('c1')}.querySelector('.approval-icon').textContent`), '✓');
  assert.equal(await view.read<string>(`getComputedStyle(${card('c1')}.querySelector('.approval-diff')).display`), 'none', 'the diff is not repeated');
  assert.equal(
    await view.read<boolean>(`!!(${card('c1')}.compareDocumentPosition(document.querySelector('.assistant')) & Node.DOCUMENT_POSITION_FOLLOWING)`),
    true,
    'the answered card stays above the text that came after it',
  );

  // Denied, with a card asked before its tool card: ✗, and the card moves into the tool card.
  view.post(approval('c2'));
  view.post(call('c2'));
  await view.flush();
  await view.until(`${toolState('c2')} === 'waiting for you' && ${card('c2')}.parentElement.matches('.tool')`, 'the early card in its tool card');
  view.post(approval('c2', { state: 'answered', outcome: 'Denied: not now', decision: 'deny' }));
  await view.flush();
  await view.until(`${card('c2')}.dataset.state === 'answered'`, 'the denied card');
  assert.equal(await view.read<string>(`${card('c2')}.querySelector('.approval-icon').textContent`), '✗', 'a denial shows ✗');
  assert.equal(await view.read<string>(`${card('c2')}.querySelector('.approval-outcome').textContent`), 'Denied: not now');
  await view.close();
});

test("a failing command's output shows once; the full-output path opens the file; the footer speaks a user's words with the receipt one click away", { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt: 'test it', chips: [], live: true } });
  const entry = (e: unknown): HostMessage => ({ type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: e as never } });
  view.post(entry({ type: 'tool.call', content: { toolCallId: 'c1', name: 'bash', arguments: { command: 'npm test' } } }));
  view.post(entry({ type: 'tool.update', content: { toolCallId: 'c1', output: 'FAIL add.test.js' } }));
  view.post(entry({ type: 'tool.failed', content: { toolCallId: 'c1', name: 'bash', error: 'FAIL add.test.js\n\nCommand exited with code 1' } }));
  view.post(entry({ type: 'tool.call', content: { toolCallId: 'c2', name: 'bash', arguments: { command: 'seq 100000' } } }));
  view.post(entry({ type: 'tool.completed', content: { toolCallId: 'c2', name: 'bash', output: '99999\n100000', truncated: true, fullOutputPath: '/tmp/pi-bash-1.log' } }));
  view.post({ type: 'turnEnded', payload: { turnId: 't1', status: 'cancelled', summary: 'Stopped · 0.4 s', receipt: 'cancelled · stopped (interrupted) in 9 ms · nothing was running' } });
  await view.flush();
  await view.until("document.querySelector('section.turn')?.dataset.status === 'cancelled'", 'the ended turn');
  const turn = await shownTurn(view);
  assert.equal(turn.tools[0]?.output, '', JSON.stringify(turn.tools[0]));
  assert.equal(turn.tools[0]?.error, 'FAIL add.test.js\n\nCommand exited with code 1');
  assert.equal(await view.read<number>("document.querySelectorAll('.tool[data-tool-call-id=\"c1\"] pre').length"), 1, 'the output shows once');
  await view.page.click('.tool[data-tool-call-id="c2"] a.full-output');
  await view.until("window.__toHost.some((m) => m.type === 'openFile')", 'the link to ask the host to open the file');
  assert.deepEqual(await view.read<unknown>("window.__toHost.find((m) => m.type === 'openFile').payload"), { path: '/tmp/pi-bash-1.log', line: 1 });
  assert.equal(turn.footer, 'Stopped · 0.4 s');
  assert.equal(await view.read<boolean>("document.querySelector('.turn-receipt').open"), false, 'the receipt starts closed');
  await view.page.click('.turn-receipt > summary');
  await view.until("document.querySelector('.turn-receipt').open", 'one click to open the receipt');
  assert.equal(turn.receipt, 'cancelled · stopped (interrupted) in 9 ms · nothing was running');
  await view.close();
});

test('@ in the input asks the host for files, folders and the selection; arrows pick, Tab takes `@path `, Enter in the popup never sends', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  await view.flush();
  const queries = "window.__toHost.filter((m) => m.type === 'mentionQuery').map((m) => m.payload.query)";
  await view.page.focus('#prompt');
  await view.page.keyboard.type('Explain @ut');
  await view.until(`${queries}.includes('ut')`, 'the host asked for @ut');
  view.post({
    type: 'mentions',
    payload: {
      query: 'ut',
      items: [
        { mention: 'src/util.py', kind: 'file', detail: '' },
        { mention: 'src/utils/', kind: 'folder', detail: 'folder' },
      ],
    },
  });
  await view.flush();
  await view.until("!document.querySelector('#mentions').hidden", 'the popup');
  assert.deepEqual(await view.read<string[]>("[...document.querySelectorAll('#mentions li')].map((li) => li.dataset.mention)"), ['src/util.py', 'src/utils/']);
  await view.page.keyboard.press('ArrowDown');
  await view.page.keyboard.press('ArrowUp');
  await view.page.keyboard.press('Enter');
  assert.equal(await view.read<string>("document.querySelector('#prompt').value"), 'Explain @src/util.py ');
  assert.equal(await view.read<number>("window.__toHost.filter((m) => m.type === 'send').length"), 0, 'Enter in the popup took the mention, it did not send');
  await view.page.keyboard.type('and @sel');
  await view.until(`${queries}.includes('sel')`, 'the host asked for @sel');
  view.post({ type: 'mentions', payload: { query: 'sel', items: [{ mention: 'selection', kind: 'selection', detail: 'lines 1-2 of a.py' }] } });
  await view.flush();
  await view.until("!document.querySelector('#mentions').hidden", 'the popup for the selection');
  await view.page.keyboard.press('Tab');
  assert.equal(await view.read<string>("document.querySelector('#prompt').value"), 'Explain @src/util.py and @selection ');
  await view.page.keyboard.press('Enter');
  await view.until("window.__toHost.some((m) => m.type === 'send')", 'the message sent');
  assert.deepEqual(await view.read<unknown>("window.__toHost.find((m) => m.type === 'send').payload"), { text: 'Explain @src/util.py and @selection ', queue: false, images: [] });
  await view.close();
});

test('a pasted image shows above the input and goes with the message; Shift+Tab cycles the mode; Escape stops a run; the input sits at the bottom of an empty chat', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  await view.flush();
  const bottom = await view.read<{ composer: number; height: number }>(
    "({ composer: document.querySelector('#composer').getBoundingClientRect().bottom, height: window.innerHeight })",
  );
  assert.ok(Math.abs(bottom.composer - bottom.height) <= 2, `the input at the bottom: ${JSON.stringify(bottom)}`);
  const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
  await view.page.focus('#prompt');
  await view.page.evaluate(`(() => {
    const bytes = Uint8Array.from(atob('${png}'), (c) => c.charCodeAt(0));
    const data = new DataTransfer();
    data.items.add(new File([bytes], 'shot.png', { type: 'image/png' }));
    document.querySelector('#prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
  })()`);
  await view.until("document.querySelectorAll('#images img').length === 1", 'the pasted image above the input');
  await view.page.keyboard.type('What is in this picture?');
  await view.page.keyboard.press('Enter');
  await view.until("window.__toHost.some((m) => m.type === 'send')", 'the message sent');
  assert.deepEqual(await view.read<unknown>("window.__toHost.find((m) => m.type === 'send').payload"), {
    text: 'What is in this picture?', queue: false, images: [{ mimeType: 'image/png', data: png }],
  });
  assert.equal(await view.read<number>("document.querySelectorAll('#images img').length"), 0, 'the tray empties once sent');

  const modes = "window.__toHost.filter((m) => m.type === 'setMode').map((m) => m.payload.mode)";
  const start = await view.read<string>("document.querySelector('#mode').value");
  await view.page.keyboard.down('Shift');
  await view.page.keyboard.press('Tab');
  await view.page.keyboard.up('Shift');
  await view.until(`${modes}.length === 1`, 'Shift+Tab to set the next mode');
  const [next] = await view.read<string[]>(modes);
  assert.notEqual(next, start);
  assert.equal(await view.read<string>('document.activeElement.id'), 'prompt', 'the focus stays in the input');

  view.post({ type: 'input', payload: { running: true, queueMode: false, queued: [], chips: [], mode: 'ask' } });
  await view.flush();
  // The running state is the page's once its button stops (Escape does nothing while idle).
  await view.until("document.querySelector('#send').dataset.action === 'stop'", 'the run shown as running');
  await view.page.keyboard.press('Escape');
  await view.until("window.__toHost.some((m) => m.type === 'stop')", 'Escape to stop the run');
  await view.close();
});

test('Restore checkpoint shows only on a turn that changed files (an edit, a command), not on `/name`', { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  const entry = (turnId: string, e: unknown): HostMessage => ({ type: 'entry', payload: { turnId, attempt: 1, stat: { added: 1, removed: 1 }, entry: e as never } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt: '/name tidy', chips: [], live: false } });
  view.post(entry('t1', { type: 'assistant', content: { text: 'Renamed.' } }));
  view.post({ type: 'turn', payload: { turnId: 't2', prompt: 'edit it', chips: [], live: false } });
  view.post(entry('t2', { type: 'tool.call', content: { toolCallId: 'c1', name: 'edit', arguments: { path: '/w/a.txt' } } }));
  view.post(entry('t2', { type: 'tool.completed', content: { toolCallId: 'c1', name: 'edit', output: 'ok', diff: { path: '/w/a.txt', line: 2 } } }));
  view.post({ type: 'turn', payload: { turnId: 't3', prompt: 'build', chips: [], live: false } });
  view.post(entry('t3', { type: 'tool.call', content: { toolCallId: 'c2', name: 'bash', arguments: { command: 'make' } } }));
  await view.flush();
  await view.until("document.querySelectorAll('section.turn .tool').length === 2", 'the three turns');
  const shown = await view.read<Record<string, boolean>>(
    "Object.fromEntries([...document.querySelectorAll('section.turn')].map((s) => [s.dataset.turnId, getComputedStyle(s.querySelector('.restore-checkpoint')).display !== 'none']))",
  );
  assert.deepEqual(shown, { t1: false, t2: true, t3: true });
  await view.close();
});

test("the agent's plan is pinned above the input, each entry with its status, replaced whole as it changes; a new conversation hides it", { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt: 'Fix the division by zero', chips: [], live: true } });
  const plan = (statuses: ('pending' | 'in_progress' | 'completed')[], middle = 'Fix <b>division</b> by zero'): HostMessage => ({
    type: 'entry',
    payload: {
      turnId: 't1', attempt: 1, stat: null,
      entry: { type: 'plan', content: { entries: ['Read the parser', middle, 'Run the tests'].map((content, i) => ({ content, status: statuses[i]! })) } },
    },
  });
  const shown = `[...document.querySelectorAll('#plan .plan-entry')].map((e) => e.dataset.status + ':' + e.querySelector('.plan-text').textContent)`;
  view.post(plan(['completed', 'in_progress', 'pending']));
  await view.flush();
  await view.until(`document.querySelectorAll('#plan .plan-entry').length === 3`, 'the plan');
  assert.deepEqual(await view.read<string[]>(shown), ['completed:Read the parser', 'in_progress:Fix <b>division</b> by zero', 'pending:Run the tests'], 'markup stays text');
  assert.equal(await view.read<string>(`document.querySelector('#plan .plan-head').textContent`), 'Plan · 1/3 done');
  assert.equal(
    await view.read<boolean>(`document.getElementById('plan').parentElement.id === 'composer' && !!(document.getElementById('plan').compareDocumentPosition(document.getElementById('prompt')) & Node.DOCUMENT_POSITION_FOLLOWING)`),
    true,
    'the plan sits in the composer, above the input',
  );
  assert.equal(await view.read<number>(`document.querySelectorAll('#thread .plan-entry').length`), 0, 'not in the thread');
  view.post(plan(['completed', 'in_progress', 'pending'], 'Fix division by zero in parse_expr'));
  view.post(plan(['completed', 'completed', 'in_progress'], 'Fix division by zero in parse_expr'));
  await view.flush();
  await view.until(`document.querySelector('#plan .plan-head').textContent === 'Plan · 2/3 done'`, 'the plan replaced');
  assert.deepEqual(await view.read<string[]>(`[...document.querySelectorAll('#plan .plan-entry')].map((e) => e.dataset.status)`), ['completed', 'completed', 'in_progress']);
  await view.page.setViewport({ width: 560, height: 460 });
  await view.page.screenshot({ path: join(extensionDir, '../../docs/images/vscode-chat-plan.png') });
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  await view.flush();
  await view.until(`document.getElementById('plan').hidden`, 'a new conversation hides the plan');
  await view.close();
});

test("a subagent's tool calls fold under its parent's card, counted, closed until opened; a call of an unknown parent stays in the answer", { timeout: RUN_TIMEOUT }, async () => {
  const view = await openChat();
  view.post({ type: 'reset', payload: { sessionId: null, title: null, omittedTurns: 0 } });
  view.post({ type: 'turn', payload: { turnId: 't1', prompt: 'Find where the parser divides', chips: [], live: true } });
  const entry = (e: Extract<HostMessage, { type: 'entry' }>['payload']['entry']): HostMessage => ({ type: 'entry', payload: { turnId: 't1', attempt: 1, stat: null, entry: e } });
  view.post(entry({ type: 'tool.call', content: { toolCallId: 'task', name: 'Task', arguments: { description: 'Find the division', prompt: 'grep for /' } } }));
  view.post(entry({ type: 'tool.call', content: { toolCallId: 'c1', name: 'Grep', arguments: { pattern: ' / ' }, parentToolCallId: 'task' } }));
  view.post(entry({ type: 'tool.completed', content: { toolCallId: 'c1', name: 'Grep', output: 'parser.py:12' } }));
  view.post(entry({ type: 'tool.call', content: { toolCallId: 'c2', name: 'Read', arguments: { path: 'parser.py' }, parentToolCallId: 'task' } }));
  view.post(entry({ type: 'tool.completed', content: { toolCallId: 'c2', name: 'Read', output: 'x = a / b' } }));
  view.post(entry({ type: 'tool.call', content: { toolCallId: 'orphan', name: 'Read', arguments: { path: 'other.py' }, parentToolCallId: 'nobody' } }));
  view.post(entry({ type: 'tool.completed', content: { toolCallId: 'task', name: 'Task', output: 'parser.py line 12 divides' } }));
  view.post(entry({ type: 'assistant', content: { text: 'The parser divides on line 12.' } }));
  await view.flush();
  await view.until(`document.querySelector('.tool[data-tool-call-id="task"]')?.dataset.status === 'completed' && !!document.querySelector('.assistant')`, 'the turn drawn');
  const group = `document.querySelector('.tool[data-tool-call-id="task"] > details.subagent')`;
  assert.deepEqual(
    await view.read<string[]>(`[...${group}.querySelectorAll('.tool')].map((t) => t.dataset.toolCallId + ':' + t.dataset.status)`),
    ['c1:completed', 'c2:completed'],
  );
  assert.equal(await view.read<string>(`${group}.querySelector('summary').textContent`), 'Subagent · 2 tool calls');
  assert.equal(await view.read<boolean>(`${group}.open`), false, 'folded until opened');
  assert.deepEqual(
    await view.read<string[]>(`[...document.querySelector('.answer').children].map((c) => c.dataset.toolCallId ?? c.classList[0])`),
    ['task', 'orphan', 'assistant'],
    'only the parent and a call whose parent is unknown are in the answer',
  );
  assert.deepEqual(
    await view.read<string[]>(`[...${group}.querySelectorAll('pre.tool-output')].map((p) => p.textContent)`),
    ['parser.py:12', 'x = a / b'],
    "each call shows its own output, never its parent's",
  );
  assert.equal(await view.read<string>(`document.querySelector('.tool[data-tool-call-id="task"] > pre.tool-output').textContent`), 'parser.py line 12 divides');
  assert.equal(await view.read<string>(`document.querySelector('.tool[data-tool-call-id="task"] .tool-command').textContent`), 'Find the division', 'the Task card says what it is for');
  await view.page.setViewport({ width: 560, height: 640 });
  await view.page.screenshot({ path: join(extensionDir, '../../docs/images/vscode-chat-subagent-folded.png') });
  await view.read(`${group}.open = true`);
  await view.page.screenshot({ path: join(extensionDir, '../../docs/images/vscode-chat-subagent-open.png') });
  await view.close();
});

test("a reopened conversation keeps its mode, title, footers and answered approval cards (#35), from the chat's memory beside pi's history", { timeout: 2 * RUN_TIMEOUT }, async () => {
  const saved = new Map<string, RememberedConversation>();
  const memory: ConversationMemory = { get: (id) => saved.get(id), set: (id, c) => void saved.set(id, structuredClone(c)) };
  const first = await openChat();
  let runId = '';
  const conversations = new Conversations({
    session: () => Promise.resolve(session),
    runParams: (prompt, id) => {
      runId = id;
      return { prompt, runId: id, model: 'toolsteer' };
    },
    post: (message) => first.post(message),
    memory,
  });
  const conversation = conversations.current;
  conversation.replay();
  await conversation.setMode('auto-edit');
  // The turn asks the user once (as the bridge's pi/requestPermission would) and is answered Deny.
  const sending = conversation.send('Run the slow command');
  await waitUntil(() => runId !== '' && conversation.turnPlace(runId) !== undefined, RUN_TIMEOUT, 'the turn to start');
  const asked = conversations.requestPermission({
    runId, toolCallId: 'call-x', tool: 'bash', kind: 'execute', title: 'bash sleep 2', input: { command: 'sleep 2' },
    options: [{ optionId: 'allow', kind: 'allow_once', name: 'Allow' }, { optionId: 'deny', kind: 'reject_once', name: 'Deny' }],
  });
  conversation.answerApproval(`${runId}/call-x`, 'deny', 'not now');
  assert.equal((await asked).optionId, 'deny');
  await withTimeout(sending, RUN_TIMEOUT, 'the turn');
  const sessionId = conversation.sessionId!;
  const footer = (view: ChatView): Promise<string> => view.read<string>(`document.querySelector('section.turn .turn-status .turn-summary')?.textContent ?? ''`);
  await first.flush();
  const shownBefore = await footer(first);
  assert.match(shownBefore, /^Done · /, shownBefore);
  await first.close();

  // Another window (a reload, a restart): the conversation is reopened from pi/session.
  const second = await openChat();
  const again = new Conversations({
    session: () => Promise.resolve(session),
    runParams: (prompt, runId2) => ({ prompt, runId: runId2, model: 'text' }),
    post: (message) => second.post(message),
    memory,
  });
  assert.equal(await again.open(sessionId), true);
  await second.flush();
  await second.until(`!!document.querySelector('section.turn .turn-status .turn-summary')`, 'the footer of the reopened turn');
  assert.equal(await footer(second), shownBefore, 'the footer as it was');
  assert.equal(again.current.mode, 'auto-edit', 'the mode as it was');
  assert.equal(await second.read<string>(`document.getElementById('mode').value`), 'auto-edit');
  assert.equal(again.current.title, 'Run the slow command', 'the title as it was');
  assert.deepEqual(
    await second.read<{ state: string; outcome: string }[]>(`[...document.querySelectorAll('.approval')].map((c) => ({ state: c.dataset.state, outcome: c.querySelector('.approval-outcome').textContent }))`),
    [{ state: 'answered', outcome: 'Denied: not now' }],
    'the answered approval card',
  );
  await second.close();
});
