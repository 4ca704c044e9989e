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

export function selectionPrompt(ctx: SelectionContext): string {
  const f = fence(ctx.text);
  return (
    `${ctx.question}\n\n` +
    `This is about lines ${ctx.startLine}-${ctx.endLine} of ${ctx.path}:\n\n` +
    `${f}${ctx.languageId}\n${ctx.text}\n${f}\n`
  );
}

export interface FileContext {
  question: string;
  path: string;
  languageId: string;
  text: string;
}

export function filePrompt(ctx: FileContext): string {
  if (ctx.text.length > MAX_INLINE_CHARS) {
    return `${ctx.question}\n\nThis is about the file ${ctx.path} (${ctx.text.length} characters; read it as needed).\n`;
  }
  const f = fence(ctx.text);
  return `${ctx.question}\n\nThis is about the file ${ctx.path}:\n\n${f}${ctx.languageId}\n${ctx.text}\n${f}\n`;
}

/** A short one-line title for a prompt (the progress notification and the run's card). */
export function promptTitle(question: string, max = 80): string {
  const line = question.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
