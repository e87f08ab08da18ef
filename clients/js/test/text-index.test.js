// Textarea offsets (UTF-16 units) and CollabText indexes (code points, as
// Array.from and the server count them) must agree at every index, lone
// surrogates included: a high surrogate not followed by a low one is one
// code point, and the unit after it is another.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { codePointIndex, utf16Offset } from '../src/index.js';

const TEXTS = [
  '',
  'abc',
  'e\u0301😀🇫🇷👩‍👩‍👧',
  '\ud800a',
  'a\udc00b',
  '\ud800\ud800\udc00',
  '\ud800\u{10000}z',
  'x\ud83d',
];

for (const text of TEXTS) {
  test(`offsets and code-point indexes agree at every index of ${JSON.stringify(text)}`, () => {
    const points = Array.from(text);
    for (let index = 0; index <= points.length; index++) {
      const offset = points.slice(0, index).join('').length;
      assert.equal(utf16Offset(text, index), offset, `utf16Offset at ${index}`);
      assert.equal(codePointIndex(text, offset), index, `codePointIndex at ${offset}`);
    }
  });
}
