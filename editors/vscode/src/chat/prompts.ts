/** Prompts for "ask about the selection" and "ask about the file" (no `vscode` import). */

/** Files larger than this are referred to by path (pi can read them) instead of inlined. */
export const MAX_INLINE_CHARS = 100_000;

function fence(text: string): string {
  let ticks = '```';
  while (text.includes(ticks)) {
    ticks += '`';
  }
  return ticks;
}

export interface SelectionContext {
  question: string;
  path: string;
  languageId: string;
  startLine: number;
  endLine: number;
  text: string;
}

function selectionBlock(ctx: Omit<SelectionContext, 'question'>): string {
  const f = fence(ctx.text);
  return `This is about lines ${ctx.startLine}-${ctx.endLine} of ${ctx.path}:\n\n${f}${ctx.languageId}\n${ctx.text}\n${f}\n`;
}

export function selectionPrompt(ctx: SelectionContext): string {
  return `${ctx.question}\n\n${selectionBlock(ctx)}`;
}

export interface FileContext {
  question: string;
  path: string;
  languageId: string;
  text: string;
}

function fileBlock(ctx: Omit<FileContext, 'question'>): string {
  if (ctx.text.length > MAX_INLINE_CHARS) {
    return `This is about the file ${ctx.path} (${ctx.text.length} characters; read it as needed).\n`;
  }
  const f = fence(ctx.text);
  return `This is about the file ${ctx.path}:\n\n${f}${ctx.languageId}\n${ctx.text}\n${f}\n`;
}

export function filePrompt(ctx: FileContext): string {
  return `${ctx.question}\n\n${fileBlock(ctx)}`;
}

/** A folder @-mentioned in a prompt: its path and the names in it (a folder's end with `/`). */
export interface FolderContext {
  path: string;
  entries: string[];
}

function folderBlock(ctx: FolderContext): string {
  return `This is about the folder ${ctx.path}, which holds:\n${ctx.entries.map((e) => `- ${e}`).join('\n')}\n`;
}

/** A selection, a file or a folder attached to the next prompt of a conversation (a chip in the chat view). */
export type ContextData =
  | ({ kind: 'selection' } & Omit<SelectionContext, 'question'>)
  | ({ kind: 'file' } & Omit<FileContext, 'question'>)
  | ({ kind: 'folder' } & FolderContext);
export type ContextChip = ContextData & { id: string };

/** The chip's short label: `hello.py:1-3` or `hello.py`. */
export function chipLabel(chip: ContextData): string {
  return chip.kind === 'selection' ? `${chip.path}:${chip.startLine}-${chip.endLine}` : chip.path;
}

/** The prompt for `question` with every chip's context after it, in the order they were added. */
export function contextPrompt(question: string, chips: readonly ContextData[]): string {
  const blocks = chips.map((chip) =>
    chip.kind === 'selection' ? selectionBlock(chip) : chip.kind === 'folder' ? folderBlock(chip) : fileBlock(chip),
  );
  return blocks.length === 0 ? question : `${question}\n\n${blocks.join('\n')}`;
}

/** A short one-line title for a prompt (the progress notification and the run's card). */
export function promptTitle(question: string, max = 80): string {
  const line = question.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
