/**
 * The words and small parts of the chat's cards and footers, kept apart from main.ts so they can
 * be tested alone: a tool that waits for the user says so, a denial shows ✗, a failing command's
 * output shows once, and a footer speaks a user's words with the bridge's receipt one click away.
 */
import type { ApprovalView } from '../chatProtocol';

/** What a tool card says while its approval card waits (instead of "running"). */
export const TOOL_STATE_WAITING = 'waiting for you';

/** The icon of an approval card: ? while it waits, ✓ allowed, ✗ denied, ■ withdrawn. */
export function approvalIcon(view: Pick<ApprovalView, 'state' | 'decision'>): string {
  if (view.state === 'pending') {
    return '?';
  }
  if (view.state === 'cancelled') {
    return '■';
  }
  return view.decision === 'deny' ? '✗' : '✓';
}

/**
 * The texts a tool card shows: a failing command's error usually repeats its output (pi puts the
 * output into the error), so a text held by the other shows once, as the error.
 */
export function shownToolTexts(output: string | undefined, error: string | undefined): { output: string | undefined; error: string | undefined } {
  const out = output?.trim() ?? '';
  const err = error?.trim() ?? '';
  if (!out || !err) {
    return { output, error };
  }
  if (err.includes(out)) {
    return { output: undefined, error };
  }
  if (out.includes(err)) {
    return { output: undefined, error: output };
  }
  return { output, error };
}

/**
 * A turn's footer: the summary in a user's words, and a "receipt" toggle that shows the bridge's
 * full account (stop reason, the stop's stage and processes) under it.
 */
export function footerNode(summary: string | null, receipt: string | null): Node[] {
  const words = document.createElement('span');
  words.className = 'turn-summary';
  words.textContent = summary ?? '';
  if (!receipt || receipt === summary) {
    return [words];
  }
  const details = document.createElement('details');
  details.className = 'turn-receipt';
  const toggle = document.createElement('summary');
  toggle.textContent = 'receipt';
  toggle.title = "The bridge's account of how the run ended";
  const body = document.createElement('code');
  body.textContent = receipt;
  details.append(toggle, body);
  return [words, details];
}
