// The SSE parser (src/sse.js SseParser) takes a stream cut anywhere, as a
// fetch hands it over, and its work is linear in what it is fed, as the
// Python client's (tests/client/test_client_sse_large_events.py):
// - a CRLF cut between two chunks is one line end: the LF that starts the
//   next chunk is not a blank line (which ended the event there, so an
//   `event: synced` line lost its name and its data went on as a delta);
// - one large event (a snapshot) in small chunks is not scanned again from
//   its start at every chunk (quadratic: 16 MiB in 64 KiB chunks took 4 s).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SseParser } from '../src/index.js';

const LARGE_EVENT_CHARS = 8 * 1024 * 1024;
const SMALL_CHUNK_CHARS = 64;
/** Far above a linear parse's fraction of a second on a loaded machine, far below a quadratic one. */
const CPU_BUDGET_MS = 5000;

function chunks(text, size) {
  const out = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

test('a CRLF cut between chunks is one line end', () => {
  const p = new SseParser();
  assert.deepEqual([...p.events('event: synced\r'), ...p.events('\ndata: AQ==\r\n\r\n')], [{ event: 'synced', data: 'AQ==' }]);
  const q = new SseParser();
  assert.deepEqual([...q.events('data: a\r'), ...q.events('\ndata: b\r'), ...q.events('\n\r'), ...q.events('\n')], [
    { event: 'message', data: 'a\nb' },
  ]);
});

test('every line end, on every chunk edge', () => {
  const data = 'QUJD'.repeat(75_000);
  const stream = `: ping\r\n\r\nevent: synced\rdata: ${data}\r\n\r\ndata: ${data}\rdata: tail\r\rdata: ${data}\n\nevent: end\r\ndata: {}\r\n\r\n`;
  for (const size of [1, 2, 3, 1000, 1001, 4093]) {
    const p = new SseParser();
    const events = chunks(stream, size).flatMap((c) => p.events(c));
    assert.deepEqual(
      events.map((e) => e.event),
      ['synced', 'message', 'message', 'end'],
      `chunks of ${size}`,
    );
    assert.equal(events[0].data, data);
    assert.equal(events[1].data, `${data}\ntail`);
    assert.equal(events[2].data, data);
    assert.equal(events[3].data, '{}');
  }
});

test('a large event in small chunks costs linear work', () => {
  const stream = `data: ${'A'.repeat(LARGE_EVENT_CHARS)}\n\n`;
  const p = new SseParser();
  const events = [];
  const started = process.cpuUsage();
  const spentMs = () => {
    const { user, system } = process.cpuUsage(started);
    return (user + system) / 1000;
  };
  let i = 0;
  for (let at = 0; at < stream.length; at += SMALL_CHUNK_CHARS, i++) {
    events.push(...p.events(stream.slice(at, at + SMALL_CHUNK_CHARS)));
    // Stop a quadratic parser early rather than wait it out.
    if (i % 1024 === 0) assert.ok(spentMs() < CPU_BUDGET_MS, `at char ${at}`);
  }
  assert.ok(spentMs() < CPU_BUDGET_MS);
  assert.equal(events.length, 1);
  assert.equal(events[0].data.length, LARGE_EVENT_CHARS);
});
