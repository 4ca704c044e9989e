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
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import type { HostMessage } from '../src/chat/chatProtocol.js';
import { Conversations } from '../src/chat/conversations.js';
import { chatPage } from '../src/chat/page.js';
import type { RunParams } from '../src/bridge/protocol.js';
import { Session } from '../src/bridge/session.js';
import { processesMatching, startBridge, withTimeout, type Bridge } from './harness.js';

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
  const view: ChatView = {
    page,
    post(message) {
      chain = chain.then(async () => {
        await page.evaluate(`window.postMessage(${JSON.stringify(message)}, '*')`);
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
  await view.page.close();
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
  await view.page.close();
});
