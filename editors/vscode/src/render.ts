/**
 * Renders a RunRecord to the HTML of one run card in the view (no `vscode` import). Model output
 * is markdown rendered with raw HTML disabled, so nothing a model writes becomes markup or script.
 */
import MarkdownIt from 'markdown-it';
import type { RunRecord, RunItem, ToolItem } from './bridge/session';
import type { Usage } from './bridge/protocol';

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
    case 'notice':
      return `<div class="notice notice-${item.level}">${escapeHtml(item.text)}</div>`;
  }
}

export function formatUsage(usage: Usage): string {
  const parts = [`${usage.input ?? 0} in`, `${usage.output ?? 0} out`];
  if (usage.cacheRead) {
    parts.push(`${usage.cacheRead} cache read`);
  }
  if (usage.cacheWrite) {
    parts.push(`${usage.cacheWrite} cache write`);
  }
  parts.push(`${usage.totalTokens ?? 0} tokens`);
  if (typeof usage.cost === 'number' && usage.cost > 0) {
    parts.push(`$${usage.cost.toFixed(4)}`);
  }
  return parts.join(' · ');
}

/** One line that says how the run stands, for the view's footer and the progress notification. */
export function statusLine(record: RunRecord): string {
  const seconds = (((record.endedAt ?? Date.now()) - record.startedAt) / 1000).toFixed(1);
  const parts: string[] = [record.status];
  if (record.attempt > 1) {
    parts.push(`attempt ${record.attempt}`);
  }
  if (record.status === 'running') {
    const tool = [...record.items].reverse().find((i): i is ToolItem => i.kind === 'tool');
    if (tool?.status === 'running') {
      parts.push(`running ${tool.name}`);
    }
  }
  if (record.stopReason && record.status === 'completed') {
    parts.push(`stop: ${record.stopReason}`);
  }
  if (record.error && record.status === 'failed') {
    parts.push(`${record.error.kind}: ${record.error.message}`);
  }
  if (record.rpcError) {
    parts.push(`error ${record.rpcError.code}: ${record.rpcError.message}`);
  }
  if (record.shutdown) {
    const { stage, elapsedMs, pids, survivors } = record.shutdown;
    const ended = `${pids.length} process${pids.length === 1 ? '' : 'es'} ended (${pids.join(', ')})`;
    const left = survivors.length ? `, SURVIVORS ${survivors.join(', ')}` : '';
    // The rpc engine aborts the turn and keeps the conversation's pi for its next prompt.
    const kept = record.shutdown.agentKept ? ' · pi kept for the conversation' : '';
    parts.push(`stopped (${stage}) in ${Math.round(elapsedMs)} ms · ${pids.length ? ended : 'nothing was running'}${left}${kept}`);
  }
  if (record.usage) {
    parts.push(formatUsage(record.usage));
  }
  parts.push(`${seconds} s`);
  return parts.join(' · ');
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
