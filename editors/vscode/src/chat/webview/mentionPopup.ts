/**
 * The input's @-mention popup: typing `@word` asks the host for completions (files, folders, the
 * selection); arrows pick, Tab or Enter puts `@path ` into the input, Escape closes. Its keys are
 * handled before the input's own (send, history), so Enter in the popup never sends.
 */
import { mentionAtCaret, type MentionItem } from '../mentions/mentionText';

const ICON: Record<MentionItem['kind'], string> = { file: '📄', folder: '📁', selection: '▤' };

export interface MentionPopup {
  /** The host's completions of `query` arrived. */
  show(query: string, items: MentionItem[]): void;
}

export function mentionPopup(input: HTMLTextAreaElement, ask: (query: string) => void): MentionPopup {
  const list = document.createElement('ul');
  list.id = 'mentions';
  list.setAttribute('role', 'listbox');
  list.setAttribute('aria-label', 'Files, folders and the selection to mention');
  list.hidden = true;
  input.before(list);
  let items: MentionItem[] = [];
  let selected = 0;
  let asked: string | null = null;
  /** The input's value when Escape closed the popup (it stays closed until the text changes). */
  let dismissed: string | null = null;

  const close = (): void => {
    list.hidden = true;
    asked = null;
  };

  const render = (): void => {
    list.replaceChildren(
      ...items.map((item, index) => {
        const row = document.createElement('li');
        row.setAttribute('role', 'option');
        row.setAttribute('aria-selected', String(index === selected));
        row.dataset.mention = item.mention;
        const name = document.createElement('span');
        name.className = 'mention-name';
        name.textContent = `${ICON[item.kind]} @${item.mention}`;
        const detail = document.createElement('span');
        detail.className = 'mention-detail';
        detail.textContent = item.detail;
        row.append(name, detail);
        row.addEventListener('mousedown', (event) => {
          event.preventDefault();
          selected = index;
          accept();
        });
        return row;
      }),
    );
    list.hidden = items.length === 0;
    list.children[selected]?.scrollIntoView({ block: 'nearest' });
  };

  const accept = (): void => {
    const item = items[selected];
    const caret = input.selectionStart ?? input.value.length;
    const at = mentionAtCaret(input.value, caret);
    if (!item || !at) {
      close();
      return;
    }
    const head = `${input.value.slice(0, at.at)}@${item.mention} `;
    input.value = head + input.value.slice(caret).replace(/^\s+/, '');
    input.setSelectionRange(head.length, head.length);
    close();
    input.focus();
    // A folder picked: its contents complete next.
    if (item.kind === 'folder') {
      input.setSelectionRange(head.length - 1, head.length - 1);
      update();
    }
  };

  const update = (): void => {
    const at = dismissed === input.value ? null : mentionAtCaret(input.value, input.selectionStart ?? input.value.length);
    if (!at) {
      close();
      return;
    }
    if (asked !== at.query) {
      asked = at.query;
      ask(at.query);
    }
  };

  input.addEventListener('input', () => {
    if (dismissed !== input.value) {
      dismissed = null;
    }
    selected = 0;
    update();
  });
  input.addEventListener('blur', close);
  input.addEventListener('keydown', (event) => {
    if (list.hidden || event.isComposing) {
      return;
    }
    let handled = true;
    if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      selected = (selected + (event.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
      render();
    } else if (event.key === 'Escape') {
      dismissed = input.value;
      close();
    } else if (event.key === 'Tab' || (event.key === 'Enter' && !event.shiftKey && !event.altKey)) {
      accept();
    } else {
      handled = false;
    }
    if (handled) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  });

  return {
    show(query, found) {
      if (query !== asked) {
        return; // an answer to an older query
      }
      items = found;
      selected = Math.min(selected, Math.max(0, items.length - 1));
      render();
    },
  };
}
