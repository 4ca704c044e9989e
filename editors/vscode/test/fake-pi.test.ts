/**
 * The client against the real bridge running the fake pi (tests/fakes/fake_pi.py, chosen through
 * initializationOptions.piCommand as the extension's `piBridge.pi.command` setting does): the
 * failure paths real pi cannot be made to take, and cancel of a pi that ignores signals.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CancellationTokenSource } from 'vscode-jsonrpc/node';
import { newRunId } from '../src/bridge/protocol';
import type { RunRecord } from '../src/bridge/run';
import { Session } from '../src/bridge/session';
import { fakePiCommand, isAlive, processesMatching, startBridge, withTimeout, type Bridge } from './harness';

const RUN_TIMEOUT = 60_000;

let bridge: Bridge;
let session: Session;

before(async () => {
  bridge = await startBridge({ scriptedModel: false, initializationOptions: { piCommand: fakePiCommand() } });
  session = new Session(bridge.rpc);
});

after(async () => {
  session.dispose();
  const code = await bridge.close();
  assert.equal(code, 0, `bridge exit code; stderr:\n${bridge.stderr().slice(-4000)}`);
  assert.deepEqual(processesMatching(/./), [], 'no process of this test outlives the bridge');
});

/** One run of `prompt` on the fake pi's `model`, to its end. */
function runOn(model: string, prompt: string): Promise<RunRecord> {
  return withTimeout(session.run({ prompt, runId: newRunId('fake'), model }), RUN_TIMEOUT, `${model} run`);
}

test('a pi that crashes mid-tool ends the run failed, with the tool failed', { timeout: RUN_TIMEOUT }, async () => {
  const record = await runOn('crash_tool', 'build it');
  assert.equal(record.status, 'failed', JSON.stringify(record));
  assert.ok(record.error, 'the failure says why');
  const tool = record.items.find((i) => i.kind === 'tool');
  assert.ok(tool?.kind === 'tool');
  assert.equal(tool.status, 'failed');
  assert.match(record.text, /Running it now/);
  // How the chat shows this turn is asserted in a browser: test/webview.test.mts.
  assert.ok(
    record.items.some((i) => i.kind === 'notice' && i.level === 'error'),
    `an error notice: ${JSON.stringify(record.items)}`,
  );
});

test('an auth error is a failed run of kind auth, not a JSON-RPC error', { timeout: RUN_TIMEOUT }, async () => {
  const record = await runOn('auth_error', 'hi');
  assert.equal(record.status, 'failed', JSON.stringify(record));
  assert.equal(record.error?.kind, 'auth');
});

test('cancel reaches a pi that ignores signals and leaves none of its processes', { timeout: RUN_TIMEOUT }, async () => {
  const cts = new CancellationTokenSource();
  const runId = newRunId('fake');
  // Processes alive before the run (the bridge, warm pis for other options) are not the run's.
  const before = new Set(processesMatching(/./));
  const pending = session.run({ prompt: 'go', runId, model: 'stubborn' }, { token: cts.token });
  await bridge.messages.waitFor((m) => m.runId === runId && m.type === 'tool.update', 30_000, 'children started');
  const during = processesMatching(/--model stubborn/).filter((pid) => !before.has(pid));
  assert.ok(during.length > 0, 'the run has processes');
  cts.cancel();
  const record = await withTimeout(pending, 30_000, 'the cancelled stubborn run');
  assert.equal(record.status, 'cancelled', JSON.stringify(record));
  assert.match(record.text, /I will not stop/);
  assert.ok(record.shutdown);
  assert.equal(record.shutdown.stage, 'killed');
  assert.deepEqual(record.shutdown.survivors, []);
  // The answer comes once the tree is gone: nothing of the run may be alive now. (The bridge may
  // already have started a warm pi for the next run; it was not alive during the run.)
  assert.deepEqual(record.shutdown.pids.filter(isAlive), []);
  assert.deepEqual(during.filter(isAlive), []);
});
