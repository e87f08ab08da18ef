"""The rga package's boundary: only ``sequence.py`` touches the sequence's insides.

Every other module of ``syncd/crdt/rga/`` is parsed (never imported) and
refused when it

- names a private member of :class:`~syncd.crdt.rga.sequence.RunSeq` (a
  ``_name`` in its ``__slots__`` or one of its ``_methods``) as an attribute
  of anything, or through ``getattr``/``setattr`` with a literal name;
- reads any ``_name`` of something that holds a sequence: an attribute
  annotated ``RunSeq`` (``self._seq``), a variable or parameter annotated so
  or assigned from one, or a ``RunSeq(...)``/``RunSeq.load(...)`` call;
- writes an attribute of anything but ``self``: runs and blocks, which the
  sequence hands out to be read, change only inside it.

The first rule catches a reach-in however the object was reached; the second,
one to a private name the sequence does not define (yet); the third, a
change to the runs it lends. The checker is tested on small sources too, so
that it keeps failing when it should.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "syncd" / "crdt" / "rga"
SEQUENCE_MODULE = "sequence.py"
SEQUENCE_CLASS = "RunSeq"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sequence_private_names(source: str) -> frozenset[str]:
    """The ``_names`` the sequence class keeps: slots, methods, attributes it sets."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == SEQUENCE_CLASS:
            for item in ast.walk(node):
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    for const in ast.walk(item.value):
                        if isinstance(const, ast.Constant) and isinstance(const.value, str):
                            names.add(const.value)
                elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                    names.add(item.attr)
    return frozenset(name for name in names if _private(name))


def _mentions_sequence(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return SEQUENCE_CLASS in text


class _Holders(ast.NodeVisitor):
    """Names and attributes that hold a sequence, found from annotations and assignments."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.attributes: set[str] = set()

    def holds(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            return node.attr in self.attributes
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == SEQUENCE_CLASS:
                return True
            if isinstance(func, ast.Attribute):
                # RunSeq.load(...), seq.clone()
                return (isinstance(func.value, ast.Name) and func.value.id == SEQUENCE_CLASS) or (
                    func.attr == "clone" and self.holds(func.value)
                )
        return False

    def _bind(self, target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.names.add(target.id)
        elif isinstance(target, ast.Attribute):
            self.attributes.add(target.attr)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if _mentions_sequence(node.annotation) or (
            node.value is not None and self.holds(node.value)
        ):
            self._bind(node.target)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.holds(node.value):
            for target in node.targets:
                self._bind(target)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        if self.holds(node.value):
            self._bind(node.target)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        if _mentions_sequence(node.annotation):
            self.names.add(node.arg)


def violations(source: str, private: frozenset[str]) -> list[str]:
    """Where ``source`` (a module other than the sequence's) breaks the boundary."""
    tree = ast.parse(source)
    holders = _Holders()
    for _ in range(3):  # a holder assigned from a holder found later in the walk
        holders.visit(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            where = f"line {node.lineno}: {ast.unparse(node)}"
            if isinstance(node.ctx, ast.Store | ast.Del) and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"
            ):
                found.append(f"{where} (writes an attribute of another object)")
            elif _private(node.attr) and node.attr in private:
                found.append(f"{where} (a private member of the sequence)")
            elif _private(node.attr) and holders.holds(node.value):
                found.append(f"{where} (a private attribute of a sequence)")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "delattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)} (a private name by string)")
    return found


def _private_of_the_sequence() -> frozenset[str]:
    return sequence_private_names((PACKAGE / SEQUENCE_MODULE).read_text())


def test_the_sequence_keeps_private_members() -> None:
    # The check below means something only if it knows what is private.
    private = _private_of_the_sequence()
    assert {"_sync", "_pend", "_blocks", "_hot_end", "_lookup", "_seek"} <= private


@pytest.mark.parametrize(
    "module",
    sorted(p.name for p in PACKAGE.glob("*.py") if p.name != SEQUENCE_MODULE),
)
def test_only_the_sequence_module_touches_its_insides(module: str) -> None:
    source = (PACKAGE / module).read_text()
    assert violations(source, _private_of_the_sequence()) == []


SEQUENCE_SOURCE = """
class RunSeq:
    __slots__ = ("_len", "_pend")

    def _sync(self) -> None:
        self._hidden = 1
"""

GOOD = """
class Rga:
    __slots__ = ("_seq",)

    def __init__(self, seq: RunSeq | None = None) -> None:
        self._seq: RunSeq = RunSeq() if seq is None else seq
        self._count = 0

    def apply(self, other: Rga) -> int:
        seq = self._seq
        self._seq.merge(other._seq)
        for run in seq.runs():
            print(run.content)
        return seq.length + self._count
"""


@pytest.mark.parametrize(
    "line",
    [
        "self._seq._sync()",  # a private method through the attribute
        "seq = self._seq\n        seq._len += 1",  # through a local
        "other._seq._pend.clear()",  # through another instance
        "x = self._seq\n        y = x\n        y._whatever",  # an unknown name, two hops
        "RunSeq()._blocks",  # on a fresh sequence
        "RunSeq.load([])._len",  # on a loaded one
        "self._seq.clone()._other",  # on a copy
        "getattr(self._seq, '_len')",  # by string
        "thing._hidden",  # a private name of the sequence, whatever holds it
        "next(self._seq.runs()).vis = 0",  # changing a run it lent
    ],
)
def test_the_check_finds_a_reach_in(line: str) -> None:
    private = sequence_private_names(SEQUENCE_SOURCE)
    assert private == {"_len", "_pend", "_sync", "_hidden"}
    assert violations(GOOD, private) == []
    bad = GOOD.replace("        return seq.length", f"        {line}\n        return seq.length")
    assert violations(bad, private), line


def test_the_check_follows_annotated_parameters() -> None:
    source = "def f(seq: RunSeq) -> int:\n    return seq._len\n"
    assert violations(source, frozenset()) == [
        "line 2: seq._len (a private attribute of a sequence)"
    ]
