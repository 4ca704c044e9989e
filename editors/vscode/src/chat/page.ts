/**
 * The chat webview's page, without the `vscode` module: the markup webview/main.ts fills, under a
 * Content-Security-Policy that runs only its own script. The view serves it; tests load it as is.
 */

export interface PageResources {
  /** The webview's `cspSource` (where its stylesheet and images may come from). */
  cspSource: string;
  /** The one script the page may run carries this nonce. */
  nonce: string;
  styleUri: string;
  scriptUri: string;
}

export function chatPage({ cspSource, nonce, styleUri, scriptUri }: PageResources): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${cspSource}; img-src ${cspSource} https: data:; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${styleUri}">
<title>pi chat</title>
</head>
<body>
<header id="header">
  <h1 id="title" class="title"></h1>
  <select id="agent" aria-label="Agent of this conversation" hidden></select>
  <select id="model" aria-label="Model of the next prompt" hidden></select>
  <label for="mode">Mode</label>
  <select id="mode" aria-label="Permission mode of this conversation" title="What pi may do without asking, from its next tool call"></select>
</header>
<div id="empty">Ask pi anything below. Enter sends, Shift+Enter adds a line, <b>/</b> lists the commands. <b>pi: Ask About Selection</b> adds context.</div>
<main id="thread" aria-label="Conversation"></main>
<div id="live" class="visually-hidden" aria-live="polite" role="status"></div>
<footer id="composer">
  <section id="plan" aria-label="Plan" hidden></section>
  <ul id="queued" aria-label="Queued messages"></ul>
  <div id="chips" class="chips" aria-label="Context for the next prompt"></div>
  <ul id="commands" role="listbox" aria-label="Commands" hidden></ul>
  <textarea id="prompt" rows="3" aria-label="Message to pi (/ lists the commands)" aria-autocomplete="list" aria-controls="commands" aria-expanded="false"></textarea>
  <div class="buttons">
    <button id="queue-toggle" aria-pressed="false" aria-label="Queue messages instead of steering (Alt+Enter queues one)" title="While a run goes: queue messages instead of steering it">Queue</button>
    <button id="send" aria-label="Send">Send</button>
  </div>
</footer>
<script nonce="${nonce}" src="${scriptUri}"></script>
</body>
</html>`;
}
