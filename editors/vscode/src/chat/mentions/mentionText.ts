/**
 * @-mentions in a chat message, without the `vscode` module: which words are mentions, and which
 * workspace paths complete a typed one. The host (mentions.ts) resolves them into context.
 */

/** A mention of the editor's selection. */
export const SELECTION_MENTION = 'selection';

/** One completion of an @-mention: a file, a folder or the selection. */
export interface MentionItem {
  /** What goes after the `@`: a workspace-relative path (a folder ends with `/`), or `selection`. */
  mention: string;
  kind: 'file' | 'folder' | 'selection';
  /** A short description (the selection's place, a folder's "folder"). */
  detail: string;
}

/** The mentions of `text`, in order and once each: `@path` at the start or after a space. */
export function mentionsIn(text: string): string[] {
  const found: string[] = [];
  for (const match of text.matchAll(/(?:^|\s)@([^\s@]+)/g)) {
    const mention = match[1]!.replace(/[.,;:!?)]+$/, '');
    if (mention && !found.includes(mention)) {
      found.push(mention);
    }
  }
  return found;
}

/** The `@word` the caret ends (`at` is where its `@` is), or null when the caret is not in one. */
export function mentionAtCaret(value: string, caret: number): { query: string; at: number } | null {
  const match = /(?:^|\s)@([^\s@]*)$/.exec(value.slice(0, caret));
  if (!match || /^\S/.test(value.slice(caret))) {
    return null;
  }
  return { query: match[1]!, at: caret - match[1]!.length - 1 };
}

/** The workspace's folders of `files` (relative paths), each ending with `/`. */
export function foldersOf(files: readonly string[]): string[] {
  const folders = new Set<string>();
  for (const file of files) {
    const parts = file.split('/');
    for (let i = 1; i < parts.length; i += 1) {
      folders.add(`${parts.slice(0, i).join('/')}/`);
    }
  }
  return [...folders];
}

/**
 * The paths that complete `query`, best first: a name that starts with it, then a path that
 * starts with it, then a path that holds it (case-insensitive); shorter paths first in each.
 */
export function rankMentions(query: string, paths: readonly string[], max = 30): string[] {
  const q = query.toLowerCase();
  const name = (p: string): string => p.replace(/\/$/, '').split('/').pop()!.toLowerCase();
  const score = (p: string): number => {
    const lower = p.toLowerCase();
    if (name(p).startsWith(q)) {
      return 0;
    }
    if (lower.startsWith(q)) {
      return 1;
    }
    return lower.includes(q) ? 2 : -1;
  };
  return paths
    .map((p) => ({ p, s: score(p) }))
    .filter((x) => x.s >= 0)
    .sort((a, b) => a.s - b.s || a.p.length - b.p.length || a.p.localeCompare(b.p))
    .slice(0, max)
    .map((x) => x.p);
}
