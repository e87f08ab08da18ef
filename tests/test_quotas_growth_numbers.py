"""The growth bound's numbers (an op's overhead past its encoding, the fixed
growth of a counter's op, the least growth after which a CRDT is measured
again) are counted for a local op by the quotas and for another node's
replayed op by the engine. The engine had copies of them (REPLAY_*), since
the quotas import the engine; now the engine holds them and the quotas
import them, so the two countings cannot drift apart."""

from __future__ import annotations

from syncd import quotas
from syncd.crdt import engine


def test_the_quotas_count_with_the_engines_numbers() -> None:
    assert quotas.OP_GROWTH_OVERHEAD is engine.OP_GROWTH_OVERHEAD
    assert quotas.FIXED_GROWTH is engine.FIXED_GROWTH
    assert quotas.REMEASURE_MIN_BYTES is engine.REMEASURE_MIN_BYTES
    assert not [name for name in vars(engine) if name.startswith("REPLAY_")]


def test_the_numbers_are_as_they_were() -> None:
    assert engine.OP_GROWTH_OVERHEAD == 64
    assert engine.FIXED_GROWTH == {"gcounter": 64, "pncounter": 64}
    assert engine.REMEASURE_MIN_BYTES == 4096
