// Following one CRDT's delta stream (docs/protocol.md#deltas) without I/O: given what a
// subscriber holds (seq and epoch), what to do with the next delta. Shared by
// the WebSocket and SSE transports, and unit-tested on its own.

/**
 * @typedef {{seq: number, epoch: string | null}} Position
 * @typedef {'snapshot' | 'first' | 'apply' | 'duplicate' | 'gap' | 'new_life' | 'deleted'} Verdict
 */

/**
 * What a delta means for a subscriber at `pos`:
 * - `snapshot`: replace everything (the first event, a resync, a lagging skip);
 * - `first`: the first op of a new life: start from the empty state, apply it;
 * - `apply`: the next op of this life (seq + 1);
 * - `duplicate`: already covered (seq not above ours): ignore;
 * - `gap`: seqs were missed: resubscribe with `since` = our seq and our epoch;
 * - `new_life`: an op of another epoch past its first seq: resubscribe from scratch;
 * - `deleted`: the CRDT was deleted: back to seq 0, no epoch.
 * @param {Position} pos
 * @param {{kind: string, seq?: number, epoch?: string | null}} delta
 * @returns {Verdict}
 */
export function classifyDelta(pos, delta) {
  switch (delta.kind) {
    case 'snapshot':
      return 'snapshot';
    case 'deleted':
      return 'deleted';
    case 'op': {
      const seq = delta.seq;
      if (!Number.isSafeInteger(seq) || seq < 1) throw new TypeError(`op delta with bad seq ${seq}`);
      const epoch = delta.epoch ?? null;
      if (epoch !== null && pos.epoch !== null && epoch !== pos.epoch) {
        // Another life of this id: its first op starts it, anything later means we missed its start.
        return seq === 1 ? 'first' : 'new_life';
      }
      if (pos.epoch === null && pos.seq === 0) return seq === 1 ? 'first' : 'new_life';
      if (seq <= pos.seq) return 'duplicate';
      if (seq > pos.seq + 1) return 'gap';
      return 'apply';
    }
    default:
      throw new TypeError(`unknown delta kind ${JSON.stringify(delta.kind)}`);
  }
}

/**
 * The position after a delta with verdict `first`, `apply`, `snapshot` or `deleted`.
 * @param {Position} pos
 */
export function advance(pos, delta, verdict) {
  if (verdict === 'snapshot') return { seq: delta.seq ?? 0, epoch: delta.epoch ?? null };
  if (verdict === 'deleted') return { seq: 0, epoch: null };
  if (verdict === 'apply' || verdict === 'first') return { seq: delta.seq, epoch: delta.epoch ?? pos.epoch };
  return pos;
}

/** The subscribe fields that resume from `pos` (docs/protocol.md#resuming), or none for a fresh start. */
export function resumeFields(pos) {
  return pos.epoch !== null && pos.seq > 0 ? { since: pos.seq, epoch: pos.epoch } : {};
}
