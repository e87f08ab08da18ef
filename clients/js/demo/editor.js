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

/**
 * Mount a collaborative editor on `element` for the Yjs document `room` of
 * namespace `namespace`; `token()` gives a current syncd token (read before
 * every connect, so a refreshed token is used on reconnect). `user.color`
 * must be `#rrggbb`: the caret extension draws any other colour as
 * transparent.
 */
export async function mountEditor({ element, namespace, room, token, user, placeholder }) {
  const doc = new Y.Doc();
  const wsBase = `${location.origin.replace(/^http/, 'ws')}/v1/namespaces/${namespace}/yjs`;
  const provider = new WebsocketProvider(wsBase, room, doc, { params: { token: await token() } });
  // y-websocket builds its URL from `params` at every connect: keep the token fresh.
  provider.on('status', async ({ status }) => {
    if (status === 'disconnected') provider.params = { token: await token() };
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
      connected: provider.wsconnected,
      synced: provider.synced,
      text: editor.getText(),
      carets: [...element.querySelectorAll('.collaboration-carets__label')].map((l) => l.textContent),
    }),
  };
}
