// Webview side of the pi view: upserts one <section> per run from the HTML the extension renders,
// keeping which <details> the user opened or closed and following the output while at the bottom.
(function () {
  const runs = document.getElementById('runs');
  const empty = document.getElementById('empty');
  const userToggled = new Map();

  // Only a click on a summary is the user's choice; <details open> parsed from new HTML is not.
  document.addEventListener('click', (event) => {
    const summary = event.target instanceof Element ? event.target.closest('summary') : null;
    const details = summary ? summary.parentElement : null;
    if (details instanceof HTMLDetailsElement && details.dataset.key) {
      userToggled.set(details.dataset.key, !details.open);
    }
  }, true);

  function atBottom() {
    const doc = document.scrollingElement || document.documentElement;
    return doc.scrollHeight - doc.scrollTop - doc.clientHeight < 40;
  }

  // Follow the stream (stay at the bottom) until the user scrolls up; resume at the bottom.
  let follow = true;
  let ownScroll = false;
  function scrollToEnd() {
    ownScroll = true;
    window.scrollTo(0, document.body.scrollHeight);
  }
  window.addEventListener('scroll', () => {
    if (ownScroll) {
      ownScroll = false;
      return;
    }
    follow = atBottom();
  });
  window.addEventListener('resize', () => {
    if (follow) {
      scrollToEnd();
    }
  });

  function upsert(runId, status, html) {
    let section = document.getElementById('run-' + runId);
    if (!section) {
      section = document.createElement('section');
      section.id = 'run-' + runId;
      section.className = 'run';
      runs.appendChild(section);
    }
    section.dataset.status = status;
    section.innerHTML = html;
    for (const el of section.querySelectorAll('details[data-key]')) {
      const wanted = userToggled.get(el.dataset.key);
      if (wanted !== undefined) {
        el.open = wanted;
      }
    }
    empty.hidden = runs.children.length > 0;
    if (follow) {
      scrollToEnd();
    }
  }

  window.addEventListener('message', (event) => {
    const msg = event.data;
    if (msg.type === 'run') {
      upsert(msg.runId, msg.status, msg.html);
    } else if (msg.type === 'clear') {
      runs.replaceChildren();
      userToggled.clear();
      empty.hidden = false;
    }
  });
  acquireVsCodeApi().postMessage({ type: 'ready' });
})();
