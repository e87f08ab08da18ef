"""The httptools parser keeps its state in slots: llhttp's callbacks read and
write it on every request, and with an instance dict past 30 attributes
CPython 3.11 drops the shared-key layout its attribute caches rely on (31
attributes cost the op path 2.7% of its instructions, measured with
``perf.studies.http_path`` under callgrind). A new attribute must be added to
``__slots__``, which this holds to."""

from __future__ import annotations

import pytest

from syncd.http.httptools_parser import HttptoolsParser


def test_the_parser_has_no_instance_dict() -> None:
    parser = HttptoolsParser(1024)
    assert not hasattr(parser, "__dict__")
    with pytest.raises(AttributeError):
        parser._not_a_slot = 1  # type: ignore[attr-defined]
