"""The rga type: a replicated sequence of JSON values (text is one element per character).

Three layers, each a module (docs/data-model.md#rga for the ops):

- :mod:`~syncd.crdt.rga.type`: :class:`Rga`, the CRDT the engine holds; it
  validates ops, makes deltas and answers, converts state.
- :mod:`~syncd.crdt.rga.sequence`: :class:`~syncd.crdt.rga.sequence.RunSeq`,
  the element sequence, and the only code that changes it; ``Rga`` uses its
  public methods alone (tests/crdt/test_rga_boundary.py holds it to that).
- :mod:`~syncd.crdt.rga.ids` and :mod:`~syncd.crdt.rga.wire`: element ids in
  client ops, and the shape checks on deltas and states from other replicas.
"""

from syncd.crdt.rga.type import Rga

__all__ = ["Rga"]
