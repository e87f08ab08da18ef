"""perf.lib.checkouts: the names a study gives its checkouts, and each one's
syncd compiled before it runs (a fresh worktree has no bytecode, and with
PYTHONDONTWRITEBYTECODE none would be written by its runs)."""

from __future__ import annotations

from pathlib import Path

from perf.lib.checkouts import checkouts


def checkout(root: Path) -> Path:
    (root / "syncd" / "sub").mkdir(parents=True)
    (root / "syncd" / "__init__.py").write_text("")
    (root / "syncd" / "sub" / "__init__.py").write_text("X = 1\n")
    return root


def compiled(root: Path) -> bool:
    return all(
        any((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))
        for path in (root / "syncd").rglob("*.py")
    )


def test_one_checkout_is_this_and_compiled(tmp_path: Path) -> None:
    code = checkout(tmp_path / "a")
    assert checkouts(code, None) == {"this": code}
    assert compiled(code)


def test_with_another_it_is_before_and_this_after_both_compiled(tmp_path: Path) -> None:
    code, other = checkout(tmp_path / "a"), checkout(tmp_path / "b")
    codes = checkouts(code, other)
    assert list(codes.items()) == [("before", other), ("after", code)]
    assert compiled(code) and compiled(other)
