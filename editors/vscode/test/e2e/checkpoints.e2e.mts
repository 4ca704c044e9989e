/**
 * The Restore checkpoint flow in the real VS Code of vscode.e2e.test.mts, which runs it with its
 * own helpers: two turns change files (an edit, a new file), the user changes one of them after,
 * then a user message's Restore checkpoint button, Files and conversation, the preview (the file to
 * remove, the user's change as a conflict, Open Diff of it: the checkpoint's text against the
 * file's), Restore; the files are back but the user's change is kept, and the chat goes on in the
 * new session, whose next prompt the model sees after the first turn only.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ElementHandle, Frame, Page } from 'puppeteer-core';

export interface RestoreUi {
  page: Page;
  workspace: string;
  tag: string;
  timeout: number;
  chatFrame(): Promise<Frame>;
  chatWait(frame: Frame, expression: string): Promise<void>;
  sendInChat(frame: Frame, text: string): Promise<void>;
  waitForTurn(frame: Frame, prompt: string, predicate: string, what: string): Promise<unknown>;
  answerCard(frame: Frame, what: RegExp): Promise<void>;
  setModel(model: string): Promise<void>;
  screenshot(name: string): Promise<string>;
  requestsEndingWith(text: string): Promise<string[][]>;
}

/** The quick pick's row whose label is `label` (codicons aside). */
function row(label: string): string {
  return `[...document.querySelectorAll('.quick-input-list .monaco-list-row')]
    .find((r) => r.querySelector('.label-name')?.textContent.trim() === ${JSON.stringify(label)}) ?? null`;
}

/** Click the quick pick's row `label` with the mouse, as a user does. */
async function clickRow(page: Page, label: string): Promise<void> {
  const handle = (await page.evaluateHandle(row(label))) as ElementHandle<Element>;
  await handle.click();
}

export async function restoreCheckpointFlow(ui: RestoreUi): Promise<void> {
  const { page, tag } = ui;
  const visible = { visible: true, timeout: ui.timeout };
  const notes = join(ui.workspace, 'notes.txt');
  const created = join(ui.workspace, 'created/new.txt');
  writeFileSync(notes, 'line one\nline two\nline three\n');
  const frame = await ui.chatFrame();
  await ui.chatWait(frame, "document.querySelectorAll('section.turn').length === 0"); // the reload test's New Conversation
  const first = `edit the notes once more ${tag}`;
  const second = `write a new file ${tag}`;
  await ui.setModel('edit');
  await ui.sendInChat(frame, first);
  await ui.answerCard(frame, /notes\.txt/);
  await ui.waitForTurn(frame, first, "status === 'completed'", 'the edit turn');
  await ui.setModel('write');
  await ui.sendInChat(frame, second);
  await ui.answerCard(frame, /new\.txt/);
  await ui.waitForTurn(frame, second, "status === 'completed'", 'the write turn');
  assert.equal(readFileSync(created, 'utf8'), 'first line\nsecond line\n', 'turn 2 created the file');
  const usersText = 'line one\nline 2, edited\nline three\nthe user was here\n';

  // Restore checkpoint on the second message: what to restore, then the preview of the dry run.
  await frame.evaluate(`[...document.querySelectorAll('section.turn')]
    .find((t) => t.querySelector('.prompt-text')?.textContent === ${JSON.stringify(second)})
    .querySelector('button.restore-checkpoint').click()`);
  await page.waitForFunction(`!!(${row('Files and conversation')})`, { timeout: ui.timeout });
  // The choice shows once turn 2's checkpoint is listed (recorded): the user changes a file after it.
  writeFileSync(notes, usersText);
  await clickRow(page, 'Files and conversation');
  await page.waitForFunction(`!!(${row('created/new.txt')}) && !!(${row('notes.txt')}) && !!(${row('Restore')})`, {
    timeout: ui.timeout,
  });
  const labels = (await page.evaluate(
    `[...document.querySelectorAll('.quick-input-list .monaco-list-row')].map((r) => r.getAttribute('aria-label'))`,
  )) as string[];
  assert.ok(labels.some((l) => /created\/new\.txt.*will be removed/.test(l)), `the new file will be removed: ${labels.join(' | ')}`);
  assert.ok(labels.some((l) => /notes\.txt.*conflict/.test(l)), `the user's change is a conflict: ${labels.join(' | ')}`);
  assert.ok(!!(await page.evaluate(`!!(${row('Restore and overwrite the conflicts')})`)), 'a choice to overwrite it');

  // Open Diff on the conflict: the file at the checkpoint against the file now.
  const conflict = (await page.evaluateHandle(row('notes.txt'))) as ElementHandle<Element>;
  await conflict.hover();
  const diffButton = await conflict.waitForSelector('.action-label.codicon-diff', { visible: true, timeout: ui.timeout });
  assert.ok(diffButton, 'the row has an Open Diff button');
  await diffButton.click();
  await page.waitForSelector('.tab[aria-label*="notes.txt (checkpoint ↔ now)"]', visible);
  await page.waitForFunction(
    `(() => {
       const sides = (cls) => [...document.querySelectorAll('.monaco-diff-editor .editor.' + cls + ' .view-lines')]
         .map((el) => el.textContent.replace(/\\u00a0/g, ' ')).join('');
       return sides('original').includes('line 2, edited') && !sides('original').includes('the user was here')
         && sides('modified').includes('the user was here');
     })()`,
    { timeout: ui.timeout },
  );
  await page.waitForFunction(`!!(${row('Restore')})`, { timeout: ui.timeout }); // the preview stays open
  await ui.screenshot('chat-restore-1-preview.png');
  assert.ok(existsSync(created) && readFileSync(notes, 'utf8') === usersText, 'the preview changed nothing');

  // Restore (the conflict kept): the new file is gone, the user's change stays.
  await clickRow(page, 'Restore');
  await page.waitForSelector('.notification-toast ::-p-text(restored 1 file)', visible);
  const toast = await page.$eval('.notification-toast', (el) => el.textContent ?? '');
  assert.match(toast, /kept 1 changed after the checkpoint \(notes\.txt\)/);
  assert.equal(existsSync(created), false, 'the created file is removed');
  assert.equal(readFileSync(notes, 'utf8'), usersText, "the user's change is kept");

  // The chat continues in the new session: turn 1 only, the rewound prompt back in the input.
  const after = await ui.chatFrame();
  await ui.chatWait(
    after,
    `[...document.querySelectorAll('section.turn .prompt-text')].map((p) => p.textContent).join('|') === ${JSON.stringify(first)}
       && document.getElementById('prompt').value === ${JSON.stringify(second)}`,
  );
  await ui.setModel('text');
  const third = `after the restore ${tag}`;
  await ui.sendInChat(after, third);
  await ui.waitForTurn(after, third, "status === 'completed'", 'the turn after the restore');
  const [request] = await ui.requestsEndingWith(third);
  assert.ok(request, 'the prompt after the restore reached the model');
  assert.ok(request.includes(first) && !request.includes(second), `the model sees turn 1, not turn 2: ${JSON.stringify(request)}`);
  await ui.screenshot('chat-restore-2-after.png');
}
