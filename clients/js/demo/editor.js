// The demo page's rich-text editor: TipTap with its Collaboration and
// CollaborationCaret extensions on a Yjs document, synced through syncd's
// y-websocket endpoint by the unmodified y-websocket provider. Bundled (with
// TipTap, ProseMirror, yjs and y-websocket) into syncd/demo/editor.js by
// scripts/build-demo.js; not part of the published client.

import { Editor } from '@tiptap/core';
import StarterKit from '@tiptap/starter-kit';
import Collaboration from '@tiptap/extension-collaboration';
import CollaborationCaret from '@tiptap/extension-collaboration-caret';
import { Placeholder } from '@tiptap/extensions';
import * as Y from 'yjs';
import { WebsocketProvider } from 'y-websocket';

// syncd's closes in y-websocket's final range (4400-4499: from 3.1 it does
// not reconnect after them, and emits `closed`; docs/yjs.md).
const CLOSE_TOKEN_ENDED = 4401; // the token expired, or was revoked
const CLOSE_READ_ENDED = 4403; // the rule that grants the read ended
const CLOSE_DOCUMENT_DELETED = 4410;

const TOKEN_RETRY_MIN_MS = 1000; // a new token that could not be had is asked for again ...
const TOKEN_RETRY_MAX_MS = 30000; // ... doubling up to this

/**
 * Mount a collaborative editor on `element` for the Yjs document `room` of
 * namespace `namespace`; `token()` gives a current syncd token (read before
 * every connect, so a refreshed token is used on reconnect), and
 * `token({ fresh: true })` a newly issued one (the current one was refused).
 * `user.color` must be `#rrggbb`: the caret extension draws any other colour
 * as transparent. `status`, an element, says why the editor stopped for good
 * (its document was deleted).
 */
export async function mountEditor({ element, namespace, room, token, user, placeholder, status }) {
  const doc = new Y.Doc();
  const wsBase = `${location.origin.replace(/^http/, 'ws')}/v1/namespaces/${namespace}/yjs`;
  const provider = new WebsocketProvider(wsBase, room, doc, { params: { token: await token() } });
  let closed = null; // the final close ({ code, reason }) that stopped the editor
  // y-websocket builds its URL from `params` at every connect: keep the token
  // fresh after every close, a refused connect included (a token that expired
  // while the server was away is refused at the upgrade, and no status
  // 'disconnected' follows a connect that never opened). Not after a final
  // close: the `closed` handler below takes those.
  provider.on('connection-close', (event) => {
    if (event && !provider.shouldReconnect(event, provider)) return;
    token().then(
      (value) => {
        provider.params = { token: value };
      },
      (err) => console.warn('syncd editor: no token:', err?.message ?? err),
    );
  });
  // A token that ended (4401) or a read that ended (4403): y-websocket 3.1
  // stops there, and the editor would go dead. A new token, then connect
  // again (until one is had: the server may be away).
  provider.on('closed', async ({ code, reason }) => {
    if (code !== CLOSE_TOKEN_ENDED && code !== CLOSE_READ_ENDED) {
      // Deleted (4410), or another final close: stay closed (reconnecting
      // would send the document back), and say so.
      closed = { code, reason };
      editor.setEditable(false);
      if (status) {
        status.textContent =
          code === CLOSE_DOCUMENT_DELETED
            ? 'This document was deleted. Reload the page to start a new one.'
            : `Disconnected: ${reason || code}.`;
        status.hidden = false;
      }
      return;
    }
    for (let wait = TOKEN_RETRY_MIN_MS; ; wait = Math.min(wait * 2, TOKEN_RETRY_MAX_MS)) {
      try {
        provider.params = { token: await token({ fresh: true }) };
        break;
      } catch (err) {
        console.warn('syncd editor: no token:', err?.message ?? err);
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
    provider.connect();
  });
  const editor = new Editor({
    element,
    injectCSS: false, // the page's CSP allows no inline <style>; style.css has the rules
    extensions: [
      StarterKit.configure({ undoRedo: false }), // Collaboration brings its own undo
      Collaboration.configure({ document: doc }),
      // Shown while the document is empty, so a visitor sees it takes typing
      // (the text is drawn by style.css from the node's data-placeholder).
      Placeholder.configure({ placeholder }),
      CollaborationCaret.configure({
        provider,
        user,
        // Styles set through the DOM, not a style attribute (the CSP refuses those).
        render: (u) => {
          const caret = document.createElement('span');
          caret.classList.add('collaboration-carets__caret');
          caret.style.borderColor = u.color;
          const label = document.createElement('div');
          label.classList.add('collaboration-carets__label');
          label.style.backgroundColor = u.color;
          label.textContent = u.name;
          caret.append(label);
          return caret;
        },
        selectionRender: (u) => ({
          nodeName: 'span',
          class: 'collaboration-carets__selection',
          'data-user': u.name,
        }),
      }),
    ],
  });
  return {
    editor,
    provider,
    doc,
    state: () => ({
      closed,
      connected: provider.wsconnected,
      synced: provider.synced,
      text: editor.getText(),
      carets: [...element.querySelectorAll('.collaboration-carets__label')].map((l) => l.textContent),
    }),
  };
}
