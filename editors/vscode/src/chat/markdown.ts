/**
 * Markdown of the chat (answers and thoughts) to HTML, with highlighted code blocks. Raw HTML is
 * off, so nothing a model writes becomes markup or script. No DOM: the webview and tests share it.
 */
import MarkdownIt from 'markdown-it';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import typescript from 'highlight.js/lib/languages/typescript';

for (const [name, lang] of Object.entries({ bash, javascript, json, python, typescript })) {
  hljs.registerLanguage(name, lang);
}
hljs.registerAliases(['sh', 'shell'], { languageName: 'bash' });
hljs.registerAliases(['js'], { languageName: 'javascript' });
hljs.registerAliases(['ts'], { languageName: 'typescript' });
hljs.registerAliases(['py'], { languageName: 'python' });

const md: MarkdownIt = new MarkdownIt({
  html: false,
  linkify: true,
  highlight: (code: string, lang: string): string => {
    if (lang && hljs.getLanguage(lang)) {
      return `<pre class="hljs"><code>${hljs.highlight(code, { language: lang, ignoreIllegals: true }).value}</code></pre>`;
    }
    return '';
  },
});

export function renderMarkdown(text: string): string {
  return md.render(text);
}
