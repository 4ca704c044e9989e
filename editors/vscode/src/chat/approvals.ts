/**
 * Approval requests (pi/requestPermission) as the chat shows them, without the `vscode` module: the
 * card's view of a request (the command, or the lines a proposed edit adds and removes), the answer
 * to send for a button, and the words that say how a card was settled.
 */
import type { ApprovalView, DiffLine } from './chatProtocol';
import type { PermissionOption, PermissionRule, RequestPermissionAnswer, RequestPermissionParams } from '../bridge/protocol';

/** Changed lines a card shows at most (Open Diff shows all of them). */
export const MAX_CARD_DIFF_LINES = 40;
/** Unchanged lines shown around a change. */
const CONTEXT_LINES = 2;

export function approvalKey(params: Pick<RequestPermissionParams, 'runId' | 'toolCallId'>): string {
  return `${params.runId}/${params.toolCallId}`;
}

/** How many lines two texts share at their start (`head`) and, after that, at their end (`tail`). */
export function commonEnds(before: string[], after: string[]): { head: number; tail: number } {
  let head = 0;
  while (head < before.length && head < after.length && before[head] === after[head]) {
    head += 1;
  }
  let tail = 0;
  while (
    tail < before.length - head &&
    tail < after.length - head &&
    before[before.length - 1 - tail] === after[after.length - 1 - tail]
  ) {
    tail += 1;
  }
  return { head, tail };
}

/**
 * A text's lines, each with its own line break: a final newline ends the last line instead of
 * starting an empty one (so "a\nb\n" is two lines), and a last line without one differs from the
 * same line with one.
 */
export function splitLines(text: string | null | undefined): string[] {
  return text ? (text.match(/[^\n]*\n|[^\n]+$/g) ?? []) : [];
}

/** A line as a card shows it: without its line break. */
function shown(line: string): string {
  return line.endsWith('\n') ? line.slice(0, -1) : line;
}

/**
 * The lines between the common head and tail of two texts: a few unchanged ones around, the
 * removed ones, then the added ones (one hunk; enough to judge an edit before it runs).
 */
export function diffLines(
  oldText: string,
  newText: string,
  max = MAX_CARD_DIFF_LINES,
): { lines: DiffLine[]; hidden: number; added: number; removed: number } {
  const before = splitLines(oldText);
  const after = splitLines(newText);
  const { head, tail } = commonEnds(before, after);
  const removed = before.slice(head, before.length - tail);
  const added = after.slice(head, after.length - tail);
  const changed: DiffLine[] = [
    ...removed.map((text): DiffLine => ({ op: '-', text: shown(text) })),
    ...added.map((text): DiffLine => ({ op: '+', text: shown(text) })),
  ];
  const kept = changed.slice(0, max);
  const lead = before.slice(Math.max(0, head - CONTEXT_LINES), head).map((text): DiffLine => ({ op: ' ', text: shown(text) }));
  const from = before.length - tail;
  const trail =
    kept.length === changed.length
      ? before.slice(from, from + CONTEXT_LINES).map((text): DiffLine => ({ op: ' ', text: shown(text) }))
      : [];
  return {
    lines: [...lead, ...kept, ...trail],
    hidden: changed.length - kept.length,
    added: added.length,
    removed: removed.length,
  };
}

/** The card of a new request (pending). */
export function approvalView(params: RequestPermissionParams): ApprovalView {
  // The whole command (the title may be cut): the request's own, else the tool's input.
  const command = typeof params.command === 'string' ? params.command : params.input['command'];
  let diff: ApprovalView['diff'] = null;
  if (params.diff) {
    const { path, oldText, newText } = params.diff;
    if (typeof newText === 'string') {
      diff = { path, ...diffLines(oldText ?? '', newText), canOpen: true, note: oldText === null || oldText === undefined ? 'a new file' : null };
    } else {
      diff = {
        path,
        lines: [],
        hidden: 0,
        added: 0,
        removed: 0,
        canOpen: false,
        note: typeof oldText === 'string' ? 'the edit would not apply to the file as it is' : 'the file could not be read',
      };
    }
  }
  return {
    key: approvalKey(params),
    turnId: params.runId,
    tool: params.tool,
    kind: params.kind,
    title: params.title,
    command: typeof command === 'string' ? command : null,
    diff,
    options: params.options.map(({ optionId, kind, name }) => ({ optionId, kind, name })),
    state: 'pending',
    outcome: null,
    decision: null,
  };
}

/** The answer for `option` (a reason only goes with a reject). */
export function answerFor(option: PermissionOption, message: string | null): RequestPermissionAnswer {
  const reason = message?.trim();
  return option.kind.startsWith('reject') && reason ? { optionId: option.optionId, message: reason } : { optionId: option.optionId };
}

/** Whether `option` lets the tool run (a card shows ✓) or stops it (✗). */
export function decisionOf(option: Pick<PermissionOption, 'kind'>): 'allow' | 'deny' {
  return option.kind.startsWith('allow') ? 'allow' : 'deny';
}

/** How a card was settled by the user, in words. */
export function outcomeText(option: PermissionOption, answer: RequestPermissionAnswer): string {
  const verb = option.kind === 'allow_once' ? 'Allowed' : option.kind === 'reject_once' ? 'Denied' : option.name;
  return answer.message ? `${verb}: ${answer.message}` : verb;
}

/** A saved rule in words, as wide as it is: "allow bash `npm test`" (that command only),
 * "allow bash `npm run *`" (a prefix), "deny edit /path/notes.txt". */
export function ruleLabel(rule: PermissionRule): string {
  const what = rule.match.command
    ? `\`${rule.match.command.join(' ')}\``
    : rule.match.commandPrefix
      ? `\`${rule.match.commandPrefix.join(' ')} *\``
      : rule.match.path
        ? rule.match.path
        : 'anything';
  return `${rule.decision} ${rule.tool === '*' ? 'any tool' : rule.tool} ${what}`;
}
