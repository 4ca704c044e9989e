/**
 * The client modules against the REAL bridge running the real pi on the bridge's scripted model:
 * streaming, tools, cancel through a CancellationTokenSource (-32800) and through pi/cancel, no
 * process of a cancelled run left behind, and the sandbox setting reaching the session.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CancellationTokenSource, ResponseError } from 'vscode-jsonrpc/node';
import {
  ErrorCodes,
  isCancelledRunData,
  Methods,
  newRunId,
  type CancelResult,
  type CancelledRunData,
  type PiMessage,
  type RunResult,
  type RunsResult,
} from '../src/bridge/protocol';
import { readSettings, runParams } from '../src/bridge/config';
import type { HostMessage } from '../src/chat/chatProtocol';
import { Conversation } from '../src/chat/conversation/conversation';
import type { RunRecord } from '../src/bridge/run';
import { Session } from '../src/bridge/session';
import { isAlive, processesMatching, startBridge, waitUntil, withTimeout, type Bridge } from './harness';

const RUN_TIMEOUT = 60_000;
const SLEEP_30 = /^sleep 30$/;

let bridge: Bridge;

before(async () => {
  bridge = await startBridge();
});

after(async () => {
  const code = await bridge.close();
  assert.equal(code, 0, `bridge exit code; stderr:\n${bridge.stderr().slice(-4000)}`);
  assert.deepEqual(processesMatching(/./), [], 'no process of this test outlives the bridge');
});

function assertSequence(messages: PiMessage[]): void {
  assert.ok(messages.length > 0, 'messages of the run');
  messages.forEach((m, i) => assert.equal(m.seq, i + 1, `seq of message ${i}`));
  const terminals = messages.filter((m) => m.type.startsWith('terminal.'));
  assert.equal(terminals.length, 1, 'exactly one terminal message');
  assert.equal(messages[messages.length - 1], terminals[0], 'the terminal message is the last');
}

function deltas(messages: PiMessage[]): string {
  return messages.map((m) => (m.type === 'assistant' ? m.content.text : '')).join('');
}

function assertGone(pids: readonly number[]): void {
  const alive = pids.filter(isAlive);
  assert.deepEqual(alive, [], 'no process of the run is alive');
}

test('initialize advertises pi-bridge protocol 1 and the mirrored methods', () => {
  assert.equal(bridge.initializeResult.serverInfo?.name, 'pi-bridge');
  const caps = bridge.initializeResult.capabilities.experimental?.piBridge;
  assert.equal(caps?.protocolVersion, 1);
  const methods = caps?.methods;
  assert.ok(Array.isArray(methods), 'the methods are advertised');
  for (const method of [Methods.run, Methods.cancel, Methods.runs]) {
    assert.ok(methods.includes(method), `${method} advertised`);
  }
});

test('a run streams deltas whose concatenation is the answer', { timeout: RUN_TIMEOUT }, async () => {
  const runId = newRunId('test');
  let answered = false;
  // Settled in the order the bridge's messages arrive: false if the first delta came before the answer.
  const answeredAtFirstDelta = bridge.messages
    .waitFor((m) => m.runId === runId && m.type === 'assistant', RUN_TIMEOUT, 'first delta')
    .then(() => answered);
  const result = await withTimeout(
    bridge.connection.sendRequest<RunResult>(Methods.run, { prompt: 'Say hello', runId, model: 'text' }).then((r) => {
      answered = true;
      return r;
    }),
    RUN_TIMEOUT,
    'pi/run answer',
  );
  const messages = bridge.messages.of(runId);
  assert.equal(result.status, 'completed', JSON.stringify(result));
  assert.equal(result.runId, runId);
  assertSequence(messages);
  const assistant = messages.filter((m) => m.type === 'assistant');
  assert.ok(assistant.length >= 2, `streamed in ${assistant.length} deltas`);
  assert.ok(result.text.length > 0);
  assert.equal(deltas(messages), result.text);
  const terminal = messages[messages.length - 1];
  assert.ok(terminal?.type === 'terminal.completed');
  assert.equal(terminal.content.text, result.text);
  assert.equal(await answeredAtFirstDelta, false, 'the first delta arrived before the answer');
  assert.ok(messages.some((m) => m.type === 'session.started'));
});

test('Session folds a tool run into text, a completed bash call and usage', { timeout: RUN_TIMEOUT }, async () => {
  const session = new Session(bridge.rpc);
  const updates: string[] = [];
  try {
    const record = await withTimeout(
      session.run(
        { prompt: 'Run echo hi', runId: newRunId('test'), model: 'tool' },
        { onUpdate: (r) => updates.push(r.status) },
      ),
      RUN_TIMEOUT,
      'tool run',
    );
    assert.equal(record.status, 'completed', JSON.stringify(record));
    assert.equal(record.seqGaps, 0);
    const tool = record.items.find((i) => i.kind === 'tool');
    assert.ok(tool?.kind === 'tool', 'a tool item');
    assert.equal(tool.name, 'bash');
    assert.equal(tool.status, 'completed');
    assert.match(tool.output, /hi/);
    assert.ok(record.text.length > 0);
    assert.ok(updates.filter((s) => s === 'running').length >= 3, 'updates while running');
    assert.equal(updates[updates.length - 1], 'completed');
    const messages = bridge.messages.of(record.runId);
    assertSequence(messages);
    const call = messages.findIndex((m) => m.type === 'tool.call');
    const done = messages.findIndex((m) => m.type === 'tool.completed' || m.type === 'tool.failed');
    assert.ok(call >= 0 && done > call, 'tool.call closed by tool.completed');
  } finally {
    session.dispose();
  }
});

test('cancel through a CancellationTokenSource rejects with -32800 and keeps the partial text', { timeout: RUN_TIMEOUT }, async () => {
  const runId = newRunId('test');
  const cts = new CancellationTokenSource();
  const request = bridge.connection.sendRequest<RunResult>(
    Methods.run,
    { prompt: 'Tell a long story', runId, model: 'slow' },
    cts.token,
  );
  await bridge.messages.waitFor((m) => m.runId === runId && m.type === 'assistant', 30_000, 'first delta of slow run');
  const cancelledAt = Date.now();
  cts.cancel();
  let data: CancelledRunData | undefined;
  await withTimeout(
    assert.rejects(request, (err: unknown) => {
      assert.ok(err instanceof ResponseError, `a ResponseError, got ${String(err)}`);
      assert.equal(err.code, ErrorCodes.requestCancelled);
      assert.ok(isCancelledRunData(err.data), `cancelled data: ${JSON.stringify(err.data)}`);
      data = err.data;
      return true;
    }),
    20_000,
    'the cancelled answer',
  );
  const elapsed = Date.now() - cancelledAt;
  assert.ok(data);
  assert.equal(data.status, 'cancelled');
  assert.equal(data.runId, runId);
  const messages = bridge.messages.of(runId);
  assertSequence(messages);
  const streamed = deltas(messages);
  assert.ok(streamed.length > 0);
  assert.equal(data.text, streamed, 'partial text is what was streamed');
  const terminal = messages[messages.length - 1];
  assert.ok(terminal?.type === 'terminal.cancelled');
  const shutdown = data.shutdown ?? terminal.content.shutdown;
  assert.deepEqual(shutdown.survivors, []);
  // The rpc engine aborts the turn and keeps the conversation's pi (agentKept); otherwise the
  // receipt names the run's processes, and all of them are gone.
  assert.ok(shutdown.agentKept === true || shutdown.pids.length > 0, 'the receipt names the run processes');
  assertGone(shutdown.pids);
  assert.ok(elapsed < 15_000, `cancel answered in ${elapsed} ms`);
});

test('Session: cancelling mid-tool stops `sleep 30` and leaves no process', { timeout: RUN_TIMEOUT }, async () => {
  const session = new Session(bridge.rpc);
  const cts = new CancellationTokenSource();
  const runId = newRunId('test');
  try {
    const pending = session.run({ prompt: 'Sleep a while', runId, model: 'toolslow' }, { token: cts.token });
    await bridge.messages.waitFor((m) => m.runId === runId && m.type === 'tool.call', 30_000, 'tool.call');
    // The tool's process shows up in /proc a moment after tool.call; poll for it, bounded.
    await waitUntil(
      () => processesMatching(SLEEP_30).length > 0,
      10_000,
      '`sleep 30` to start',
    );
    cts.cancel();
    const record: RunRecord = await withTimeout(pending, 20_000, 'cancelled run record');
    assert.equal(record.status, 'cancelled', JSON.stringify(record));
    const tool = record.items.find((i) => i.kind === 'tool');
    assert.ok(tool?.kind === 'tool');
    assert.equal(tool.status, 'cancelled');
    assert.ok(record.shutdown, 'shutdown receipt');
    assert.deepEqual(record.shutdown.survivors, []);
    assertGone(record.shutdown.pids);
    const leftover = processesMatching(SLEEP_30);
    assert.deepEqual(leftover, [], 'no `sleep 30` left');
    const messages = bridge.messages.of(runId);
    assertSequence(messages);
    const closed = messages.find((m) => m.type === 'tool.completed' || m.type === 'tool.failed');
    assert.ok(closed, 'the tool call was closed');
  } finally {
    session.dispose();
  }
});

test('pi/runs lists a live run and pi/cancel stops it', { timeout: RUN_TIMEOUT }, async () => {
  const runId = newRunId('test');
  const request = bridge.connection.sendRequest<RunResult>(Methods.run, {
    prompt: 'Another long story',
    runId,
    model: 'slow',
  });
  const rejected = assert.rejects(
    request,
    (err: unknown) => err instanceof ResponseError && err.code === ErrorCodes.requestCancelled,
  );
  await bridge.messages.waitFor((m) => m.runId === runId && m.type === 'assistant', 30_000, 'first delta');
  const runs = await bridge.connection.sendRequest<RunsResult>(Methods.runs);
  assert.ok(runs.runs.some((r) => r.runId === runId), JSON.stringify(runs));
  const cancel = await withTimeout(
    bridge.connection.sendRequest<CancelResult>(Methods.cancel, { runId }),
    20_000,
    'pi/cancel',
  );
  assert.equal(cancel.found, true);
  assert.ok(cancel.shutdown);
  assert.deepEqual(cancel.shutdown.survivors, []);
  await withTimeout(rejected, 20_000, 'the cancelled run answer');
  assertGone(cancel.shutdown.pids);
  const after = await bridge.connection.sendRequest<RunsResult>(Methods.runs);
  assert.ok(!after.runs.some((r) => r.runId === runId), 'a finished run is no longer listed');
});

test(
  'pi/runs answers a request without params ("No params" in the contract)',
  { timeout: RUN_TIMEOUT },
  async () => {
    const runs = await withTimeout(bridge.connection.sendRequest<RunsResult>(Methods.runs), 10_000, 'pi/runs');
    assert.ok(Array.isArray(runs.runs));
  },
);

test('invalid params answer -32602 naming the field', { timeout: RUN_TIMEOUT }, async () => {
  await assert.rejects(
    bridge.connection.sendRequest(Methods.run, { prompt: '' }),
    (err: unknown) => err instanceof ResponseError && err.code === ErrorCodes.invalidParams && /prompt/.test(err.message),
  );
  const session = new Session(bridge.rpc);
  try {
    const record = await session.run({ prompt: 'x', runId: 'bad id with spaces' });
    assert.equal(record.status, 'error');
    assert.equal(record.rpcError?.code, ErrorCodes.invalidParams);
  } finally {
    session.dispose();
  }
});

test('Conversation: the second turn continues the first one\'s session, and open() replays both from pi/session', { timeout: 2 * RUN_TIMEOUT }, async () => {
  const posted: HostMessage[] = [];
  const session = new Session(bridge.rpc);
  const host = {
    session: () => Promise.resolve(session),
    runParams: (prompt: string, runId: string) => ({ prompt, runId, model: 'text' }),
    post: (m: HostMessage) => posted.push(m),
  };
  const conversation = new Conversation(host);
  await conversation.send('first turn of the conversation');
  const first = conversation.sessionId;
  assert.ok(first, 'the first turn got a session');
  await conversation.send('second turn of the conversation');
  assert.equal(conversation.sessionId, first, 'the second turn continued the same session');
  const ended = posted.filter((m) => m.type === 'turnEnded').map((m) => m.type === 'turnEnded' && m.payload.status);
  assert.deepEqual(ended, ['completed', 'completed']);
  const usage = conversation.lastUsage.contextUsage;
  assert.ok(usage && usage.contextWindow > 0, `terminal.completed carried the context usage: ${JSON.stringify(usage)}`);

  const replayed: HostMessage[] = [];
  const reopened = new Conversation({ ...host, post: (m: HostMessage) => replayed.push(m) });
  assert.equal(await reopened.open(first), true);
  const prompts = replayed.flatMap((m) => (m.type === 'turn' ? [m.payload.prompt] : []));
  assert.deepEqual(prompts, ['first turn of the conversation', 'second turn of the conversation']);
  assert.ok(replayed.some((m) => m.type === 'entry' && m.payload.entry.type === 'assistant'), 'the answers are replayed');
  session.dispose();
});

test('a run made with runParams under the workspace-write setting starts a session confined by bwrap', { timeout: RUN_TIMEOUT }, async () => {
  const availability = bridge.initializeResult.capabilities.experimental?.piBridge?.sandbox;
  // CI installs bubblewrap (ci.sh), so a missing sandbox fails here instead of skipping.
  assert.equal(availability?.available, true, `the bridge can sandbox here: ${JSON.stringify(availability)}`);
  const raw: Record<string, unknown> = { 'pi.model': 'text', 'sandbox.mode': 'workspace-write' };
  const warnings: string[] = [];
  const settings = readSettings((key) => raw[key], (w) => warnings.push(w));
  assert.deepEqual(warnings, []);
  const workspace = mkdtempSync(join(tmpdir(), 'pi-bridge-vscode-sandbox-'));
  try {
    const runId = newRunId('test');
    const result = await withTimeout(
      bridge.connection.sendRequest<RunResult>(Methods.run, runParams(settings, 'Say hello', runId, workspace)),
      RUN_TIMEOUT,
      'the sandboxed pi/run answer',
    );
    assert.equal(result.status, 'completed', JSON.stringify(result));
    const started = await bridge.messages.waitFor(
      (m) => m.runId === runId && m.type === 'session.started',
      10_000,
      'session.started of the sandboxed run',
    );
    assert.ok(started.type === 'session.started');
    assert.deepEqual(started.content.sandbox, { kind: 'bwrap', mode: 'workspace-write', network: false });
    assertSequence(bridge.messages.of(runId));
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
});

test('Conversation: Stop puts the unsent steer and the queued message back in the input, and the next prompt has neither', { timeout: 2 * RUN_TIMEOUT }, async () => {
  const posted: HostMessage[] = [];
  const session = new Session(bridge.rpc);
  let model = 'slow';
  const conversation = new Conversation({
    session: () => Promise.resolve(session),
    runParams: (prompt: string, runId: string) => ({ prompt, runId, model }),
    post: (m: HostMessage) => posted.push(m),
  });
  const turn = conversation.send('Divide these numbers');
  await waitUntil(() => posted.some((m) => m.type === 'entry' && m.payload.entry.type === 'assistant'), 30_000, 'the first delta');
  await conversation.send('Focus on division by zero only');
  assert.ok(posted.some((m) => m.type === 'announce' && m.payload.text === 'steering message sent'), 'the steer was taken');
  await conversation.send('Then add tests', true);
  await conversation.stop();
  await withTimeout(turn, 20_000, 'the stopped turn');
  const ended = posted.filter((m) => m.type === 'turnEnded').map((m) => m.type === 'turnEnded' && m.payload.status);
  assert.deepEqual(ended, ['cancelled']);
  const unsent = posted.filter((m) => m.type === 'unsent').map((m) => m.type === 'unsent' && m.payload.texts);
  assert.deepEqual(unsent, [['Focus on division by zero only', 'Then add tests']]);
  const input = posted.filter((m) => m.type === 'input').at(-1);
  assert.ok(input?.type === 'input' && input.payload.queued.length === 0, 'the queue went back to the input');

  model = 'echo';
  await conversation.send('Hello again');
  const last = posted.filter((m) => m.type === 'turnEnded').at(-1);
  assert.ok(last?.type === 'turnEnded' && last.payload.status === 'completed', JSON.stringify(last));
  const answer = posted
    .filter((m) => m.type === 'entry' && m.payload.turnId !== undefined && m.payload.entry.type === 'assistant')
    .map((m) => (m.type === 'entry' && m.payload.entry.type === 'assistant' ? `${m.payload.turnId}\t${m.payload.entry.content.text}` : ''))
    .filter((line) => line.startsWith(`${last.payload.turnId}\t`))
    .map((line) => line.split('\t')[1])
    .join('');
  assert.equal(answer, 'ECHO:Hello again', 'the model saw the new prompt last, not the old steer');
  assert.equal(posted.filter((m) => m.type === 'turnEnded').length, 2, 'the queued message never ran as a turn');
  session.dispose();
});
