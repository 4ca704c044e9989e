/**
 * Restore checkpoint without a VS Code: which checkpoint a chat turn is and what the preview lists
 * (checkpointPlan.ts), then the chat's Conversation against the REAL bridge running real pi on the
 * scripted model: an edit, a created file, a file the user changes after, the dry run and
 * pi/checkpointFile the preview shows, the rewind, and the conversation going on in the new session.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  checkpointOfTurn,
  CheckpointMethods,
  listCheckpoints,
  previewFiles,
  rewindSummary,
  type Checkpoint,
  type CheckpointFile,
  type CheckpointsResult,
  type RewindResult,
} from '../src/chat/rewind/checkpointPlan';
import type { HostMessage } from '../src/chat/chatProtocol';
import { Conversation, type ConversationHost } from '../src/chat/conversation/conversation';
import { Methods, type SessionHistory } from '../src/bridge/protocol';
import { Session } from '../src/bridge/session';
import { processesMatching, startBridge, type Bridge } from './harness';

const RUN_TIMEOUT = 90_000;

function checkpoint(id: string, prompt: string, runId: string | null = null): Checkpoint {
  return { checkpointId: id, prompt, createdAt: '2026-12-03T06:00:00Z', runId, files: [], notes: [] };
}

test('a live turn is the checkpoint of its run id', () => {
  const list = [checkpoint('a', 'same'), checkpoint('b', 'same', 'chat-2')];
  assert.equal(checkpointOfTurn(list, { index: 0, count: 1, prompt: 'same', runId: 'chat-2' })?.checkpointId, 'b');
});

test('a turn from history is the checkpoint at its place counted from the newest, when the prompts agree', () => {
  // The history shows the last two turns; the bridge kept three checkpoints.
  const list = [checkpoint('a', 'one'), checkpoint('b', 'two'), checkpoint('c', 'three')];
  assert.equal(checkpointOfTurn(list, { index: 0, count: 2, prompt: 'two', runId: null })?.checkpointId, 'b');
  assert.equal(checkpointOfTurn(list, { index: 1, count: 2, prompt: 'three', runId: null })?.checkpointId, 'c');
  // A prompt sent with context (a chip) starts with the turn's prompt.
  const withContext = [checkpoint('x', 'explain\n\nFrom a.py, lines 1-2:\n```\n```')];
  assert.equal(checkpointOfTurn(withContext, { index: 0, count: 1, prompt: 'explain', runId: null })?.checkpointId, 'x');
  // Places that disagree (a turn without a checkpoint): the newest with that prompt, else none.
  assert.equal(checkpointOfTurn(list, { index: 0, count: 3, prompt: 'three', runId: null })?.checkpointId, 'c');
  assert.equal(checkpointOfTurn(list, { index: 0, count: 1, prompt: 'four', runId: null }), undefined);
});

test('the preview says how each file changes; conflicts come last', () => {
  const files = previewFiles(
    { restored: ['made.txt', 'gone.txt', 'changed.txt'], conflicts: ['mine.txt'] },
    (path) => path !== 'made.txt',
    (path) => path !== 'gone.txt',
  );
  assert.deepEqual(
    files.map((f) => [f.path, f.change]),
    [
      ['made.txt', 'removed'],
      ['gone.txt', 'recreated'],
      ['changed.txt', 'restored'],
      ['mine.txt', 'conflict'],
    ],
  );
  assert.match(files[3]!.description, /conflict.*kept unless overwritten/);
  assert.match(files[0]!.description, /will be removed/);
  assert.equal(
    rewindSummary('both', { restored: ['made.txt'], conflicts: ['mine.txt'] }, 'write it'),
    'pi: restored 1 file; kept 1 changed after the checkpoint (mine.txt); the conversation continues from before “write it”.',
  );
  assert.equal(rewindSummary('conversation', { restored: [], conflicts: [] }, 'x'), 'pi: the conversation continues from before “x”.');
});

let bridge: Bridge;
let workspace: string;

before(async () => {
  bridge = await startBridge();
  workspace = mkdtempSync(join(tmpdir(), 'pi-bridge-vscode-checkpoints-'));
});

after(async () => {
  const code = await bridge.close();
  rmSync(workspace, { recursive: true, force: true });
  assert.equal(code, 0, `bridge exit code; stderr:\n${bridge.stderr().slice(-4000)}`);
  assert.deepEqual(processesMatching(/./), [], 'no process of this test outlives the bridge');
});

test('restore a checkpoint: the dry run and the old texts the preview shows, then files and conversation', { timeout: 4 * RUN_TIMEOUT }, async () => {
  const notes = join(workspace, 'notes.txt');
  const created = join(workspace, 'created/new.txt');
  writeFileSync(notes, 'line one\nline two\nline three\n');
  const session = new Session(bridge.rpc);
  let model = 'edit';
  const posted: HostMessage[] = [];
  const host: ConversationHost = {
    session: () => Promise.resolve(session),
    runParams: (prompt: string, runId: string) => ({ prompt, runId, model, cwd: workspace }),
    post: (m: HostMessage) => posted.push(m),
  };
  const conversation = new Conversation(host);
  await conversation.send('edit the notes');
  assert.equal(readFileSync(notes, 'utf8'), 'line one\nline 2, edited\nline three\n', 'turn 1 edited notes.txt');
  model = 'write';
  await conversation.send('write a new file');
  assert.equal(readFileSync(created, 'utf8'), 'first line\nsecond line\n', 'turn 2 created created/new.txt');
  const sessionId = conversation.sessionId!;
  const turnIds = posted.flatMap((m) => (m.type === 'turn' ? [m.payload.turnId] : []));
  assert.equal(turnIds.length, 2);

  const list = await listCheckpoints(
    (params) => session.request<CheckpointsResult>(CheckpointMethods.checkpoints, params),
    sessionId,
    conversation.turnPlace(turnIds[1]!)!.runId,
  );
  assert.equal(list.available, true, `checkpoints available: ${JSON.stringify(list)}`);
  // Listed, turn 2's checkpoint is recorded: the user changes a file after it, which a rewind
  // must not overwrite unasked.
  const usersText = 'line one\nline 2, edited\nline three\nthe user was here\n';
  writeFileSync(notes, usersText);
  assert.deepEqual(list.checkpoints.map((c) => c.prompt), ['edit the notes', 'write a new file']);
  const second = checkpointOfTurn(list.checkpoints, conversation.turnPlace(turnIds[1]!)!);
  assert.equal(second?.checkpointId, list.checkpoints[1]!.checkpointId, 'turn 2 is the second checkpoint');
  assert.deepEqual(second.files, ['created/new.txt']);

  const params = { sessionId, checkpointId: second.checkpointId, restore: 'both' as const };
  const dry = await session.request<RewindResult>(CheckpointMethods.rewind, { ...params, dryRun: true });
  assert.equal(dry.dryRun, true);
  assert.deepEqual(dry.restored, ['created/new.txt']);
  assert.deepEqual(dry.conflicts, ['notes.txt']);
  assert.ok(existsSync(created) && readFileSync(notes, 'utf8') === usersText, 'a dry run changes nothing');
  const olds = new Map<string, CheckpointFile>();
  for (const path of [...dry.restored, ...dry.conflicts]) {
    const file = { sessionId, checkpointId: second.checkpointId, path };
    olds.set(path, await session.request<CheckpointFile>(CheckpointMethods.checkpointFile, file));
  }
  assert.equal(olds.get('created/new.txt')?.content, null, 'created/new.txt did not exist at the checkpoint');
  assert.equal(olds.get('notes.txt')?.content, 'line one\nline 2, edited\nline three\n', "notes.txt as turn 1 left it");
  const files = previewFiles(dry, (path) => olds.get(path)!.content !== null, (path) => existsSync(join(workspace, path)));
  assert.deepEqual(files.map((f) => [f.path, f.change]), [['created/new.txt', 'removed'], ['notes.txt', 'conflict']]);

  const done = await session.request<RewindResult>(CheckpointMethods.rewind, params);
  assert.deepEqual([done.dryRun, done.restored, done.conflicts], [false, ['created/new.txt'], ['notes.txt']]);
  assert.equal(existsSync(created), false, 'the created file is gone');
  assert.equal(readFileSync(notes, 'utf8'), usersText, "the user's change is kept");
  assert.notEqual(done.sessionId, sessionId, 'the conversation goes on in a new session');

  // The chat continues there: it shows turn 1 only, and the next prompt goes to the new session.
  const shown: HostMessage[] = [];
  const continued = new Conversation({ ...host, post: (m: HostMessage) => shown.push(m) });
  assert.equal(await continued.open(done.sessionId), true);
  assert.deepEqual(shown.flatMap((m) => (m.type === 'turn' ? [m.payload.prompt] : [])), ['edit the notes']);
  model = 'text';
  await continued.send('after the rewind');
  assert.equal(continued.sessionId, done.sessionId);
  const history = await session.request<SessionHistory>(Methods.session, { sessionId: done.sessionId });
  assert.deepEqual(history.turns.map((t) => t.prompt), ['edit the notes', 'after the rewind']);
  const old = await session.request<SessionHistory>(Methods.session, { sessionId });
  assert.deepEqual(old.turns.map((t) => t.prompt), ['edit the notes', 'write a new file'], 'the old branch stays readable');
  session.dispose();
});
