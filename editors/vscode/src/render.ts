/**
 * Renders a RunRecord to the HTML of one run card in the view (no `vscode` import). Model output
 * is markdown rendered with raw HTML disabled, so nothing a model writes becomes markup or script.
 */
import MarkdownIt from 'markdown-it';
import { statusLine, type RunRecord, type RunItem, type ToolItem } from './bridge/run';

const md = new MarkdownIt({ html: false, linkify: true, breaks: false });

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const MAX_TOOL_OUTPUT = 20_000;

function toolSummary(tool: ToolItem): string {
  const command = tool.arguments['command'];
  if (typeof command === 'string') {
    return command;
  }
  const path = tool.arguments['path'];
  if (typeof path === 'string') {
    return path;
  }
  const json = JSON.stringify(tool.arguments);
  return json.length > 120 ? `${json.slice(0, 117)}...` : json;
}

const TOOL_ICON: Record<ToolItem['status'], string> = {
  running: '⟳',
  completed: '✓',
  failed: '✗',
  cancelled: '■',
};

function tail(text: string): string {
  return text.length > MAX_TOOL_OUTPUT ? `...\n${text.slice(-MAX_TOOL_OUTPUT)}` : text;
}

function renderItem(record: RunRecord, item: RunItem, index: number): string {
  const key = escapeHtml(`${record.runId}:${index}`);
  switch (item.kind) {
    case 'text':
      return `<div class="assistant markdown">${md.render(item.text)}</div>`;
    case 'thought':
      return (
        `<details class="thought" data-key="${key}"><summary>Thought${item.live ? ' (live)' : ''}</summary>` +
        `<div class="markdown">${md.render(item.text)}</div></details>`
      );
    case 'tool': {
      const body: string[] = [];
      if (item.output) {
        body.push(`<pre class="tool-output">${escapeHtml(tail(item.output))}</pre>`);
      }
      if (item.error) {
        body.push(`<pre class="tool-error">${escapeHtml(tail(item.error))}</pre>`);
      }
      if (item.truncated) {
        body.push(
          `<div class="note">output truncated${item.fullOutputPath ? `; full output in ${escapeHtml(item.fullOutputPath)}` : ''}</div>`,
        );
      }
      const open = item.status === 'running' || item.status === 'failed' ? ' open' : '';
      return (
        `<details class="tool tool-${item.status}" data-key="${key}"${open}>` +
        `<summary><span class="icon">${TOOL_ICON[item.status]}</span> <span class="tool-name">${escapeHtml(item.name)}</span> ` +
        `<code>${escapeHtml(toolSummary(item))}</code> <span class="tool-status">${item.status}</span></summary>` +
        `${body.join('')}</details>`
      );
    }
    case 'steered':
      return `<div class="notice notice-info">${escapeHtml(`steered: ${item.text}`)}</div>`;
    case 'notice':
      return `<div class="notice notice-${item.level}">${escapeHtml(item.text)}</div>`;
  }
}

/** The inner HTML of the run's card. */
export function renderRun(record: RunRecord): string {
  const items = record.items.map((item, index) => renderItem(record, item, index)).join('');
  const waiting =
    record.status === 'running' && record.items.length === 0 ? '<div class="note">waiting for pi…</div>' : '';
  return (
    `<header class="prompt" title="${escapeHtml(record.prompt)}">${escapeHtml(record.title)}</header>` +
    `<div class="body">${items}${waiting}</div>` +
    `<footer class="status status-${record.status}" data-status="${record.status}">${escapeHtml(statusLine(record))}</footer>`
  );
}
