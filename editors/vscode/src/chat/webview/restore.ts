/**
 * A user message's "Restore checkpoint" button: the host (checkpoints.ts) asks what to restore,
 * previews the files and rewinds; the webview only says which turn.
 */
export function restoreButton(onClick: () => void): HTMLButtonElement {
  const button = document.createElement('button');
  button.className = 'restore-checkpoint';
  button.textContent = '↺ Restore checkpoint';
  button.title = 'Restore the files, the conversation or both to how they were before this message';
  button.setAttribute('aria-label', 'Restore checkpoint: the files, the conversation or both as before this message');
  button.addEventListener('click', onClick);
  return button;
}
