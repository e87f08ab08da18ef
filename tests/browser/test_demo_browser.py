"""The demo page in real headless Chromium against a real syncd subprocess:
two windows edit at once and converge, presence comes and goes, and a page
survives a server restart."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.browser.conftest import Browser, read_state, wait_until
from tests.conftest import Subprocess

TEXT = "[data-testid=text]"


def room() -> str:
    return uuid.uuid4().hex[:12]


def open_pair(browser: Browser, url: str, names: tuple[str, ...] = ("Ann", "Bob")) -> None:
    browser.call(
        "parallel",
        steps=[{"cmd": "open", "page": n, "url": f"{url}&name={n}"} for n in names],
    )


def converged(
    browser: Browser, pages: tuple[str, ...], base_url: str, rm: str
) -> Callable[[], Any]:
    """A check: every page shows the server's counter, todos and text, nothing pending."""

    def check() -> Any:
        server_text = read_state(base_url, f"rg:demo-text-{rm}")
        server_count = read_state(base_url, f"pn:demo-counter-{rm}")
        server_todos = read_state(base_url, f"or:demo-todos-{rm}")
        expected = {
            "text": (server_text or {}).get("text", ""),
            "counter": (server_count or {}).get("value", 0),
            "todos": sorted(t["text"] for t in (server_todos or {}).get("value", [])),
        }
        for page in pages:
            s = browser.state(page)
            shown = {
                "text": s["shownText"],
                "counter": s["counter"] or 0,
                "todos": sorted(s["todos"]),
            }
            if s["pending"] or s["text"] != s["shownText"] or shown != expected:
                return None
        return expected

    return check


def test_two_windows_edit_at_once_and_converge(
    browser: Browser, demo_server: Callable[..., Subprocess], tmp_path: Path
) -> None:
    server = demo_server()
    rm = room()
    open_pair(browser, f"{server.url}/demo/?room={rm}")
    browser.call(
        "parallel", steps=[{"cmd": "focus", "page": p, "selector": TEXT} for p in ("Ann", "Bob")]
    )

    # Everything at once: both type into the same empty text, click the
    # counter and add todos while the other does the same.
    steps: list[dict[str, Any]] = [
        {"cmd": "type", "page": "Ann", "text": "alpha beta gamma ", "delay": 15},
        {"cmd": "type", "page": "Bob", "text": "one two three ", "delay": 15},
    ]
    for page, button, times in (("Ann", "inc", 5), ("Bob", "dec", 2), ("Bob", "inc", 3)):
        steps.append({"cmd": "eval", "page": page, "js": _clicks(button, times)})
    steps.append({"cmd": "eval", "page": "Ann", "js": _add_todos(["milk", "bread"])})
    steps.append({"cmd": "eval", "page": "Bob", "js": _add_todos(["tests", "docs"])})
    browser.call("parallel", steps=steps)

    final = wait_until(converged(browser, ("Ann", "Bob"), server.url, rm))
    assert final["counter"] == 5 - 2 + 3
    assert final["todos"] == ["bread", "docs", "milk", "tests"]
    text = final["text"]
    # Each window's run of typing stays whole (RGA does not interleave it).
    assert sorted([text.find("alpha beta gamma "), text.find("one two three ")])[0] == 0
    assert len(text) == len("alpha beta gamma ") + len("one two three ")

    # Now edits that only make sense by position: Bob inserts inside the
    # text while Ann deletes its end; both intentions survive.
    browser.call("eval", page="Bob", js=_set_caret(text.index("beta")))
    end = len(text)
    browser.call("eval", page="Ann", js=_set_caret(end))
    browser.call(
        "parallel",
        steps=[
            {"cmd": "type", "page": "Bob", "text": "BIG ", "delay": 10},
            {"cmd": "press", "page": "Ann", "key": "Backspace", "count": 3},
        ],
    )
    final = wait_until(converged(browser, ("Ann", "Bob"), server.url, rm))
    assert "alpha BIG beta gamma " in final["text"] or "alpha BIG beta gam" in final["text"]
    assert len(final["text"]) == end + len("BIG ") - 3

    # Removing a todo in one window removes it in the other.
    browser.call("click", page="Ann", selector="[aria-label='remove milk']")
    final = wait_until(converged(browser, ("Ann", "Bob"), server.url, rm))
    assert final["todos"] == ["bread", "docs", "tests"]

    shots = os.environ.get("SYNCD_SCREENSHOT_DIR")
    for page in ("Ann", "Bob"):
        path = Path(shots or tmp_path) / f"demo-{page}.png"
        browser.call("screenshot", page=page, path=str(path))
        assert path.stat().st_size > 10_000


def test_presence_shows_both_and_drops_a_closed_window(
    browser: Browser, demo_server: Callable[..., Subprocess]
) -> None:
    server = demo_server()
    rm = room()
    open_pair(browser, f"{server.url}/demo/?room={rm}")
    for page in ("Ann", "Bob"):
        browser.call("wait", page=page, js=_presence_is(["Ann", "Bob"]))
    # Cursors: Bob sees where Ann's caret is.
    browser.call("focus", page="Ann", selector=TEXT)
    browser.call("type", page="Ann", text="hello")
    browser.call(
        "wait", page="Bob", js="document.querySelector('.caret[data-name=\"Ann\"]') !== null"
    )
    # The caret sits where Ann's is: after "hello", in Bob's copy of the text.
    before_caret = "document.querySelector('.caret[data-name=\"Ann\"]').previousSibling.textContent"
    browser.call("wait", page="Bob", js=f"{before_caret} === 'hello'")
    browser.call("press", page="Ann", key="ArrowLeft", count=2)
    browser.call("wait", page="Bob", js=f"{before_caret} === 'hel'")
    # Focus elsewhere: no caret.
    browser.call("focus", page="Ann", selector="[data-testid=todo-input]")
    browser.call(
        "wait", page="Bob", js="document.querySelector('.caret[data-name=\"Ann\"]') === null"
    )
    browser.call("close", page="Bob")
    browser.call("wait", page="Ann", js=_presence_is(["Ann"]))
    value = (read_state(server.url, f"pr:demo-room-{rm}") or {}).get("value", {})
    assert [entry["name"] for entry in value.values()] == ["Ann"]


def test_page_survives_a_server_restart_and_catches_up(
    browser: Browser, demo_server: Callable[..., Subprocess]
) -> None:
    server = demo_server()
    rm = room()
    open_pair(browser, f"{server.url}/demo/?room={rm}")
    browser.call("focus", page="Ann", selector=TEXT)
    browser.call("type", page="Ann", text="before ")
    wait_until(converged(browser, ("Ann", "Bob"), server.url, rm))

    assert server.terminate() == 0
    browser.call("wait", page="Ann", js="window.syncdDemo.state().status !== 'open'")
    # Typed while the server is down: shown at once, sent after the reconnect.
    browser.call("type", page="Ann", text="during ")
    browser.call("eval", page="Bob", js=_clicks("inc", 2))
    assert browser.state("Ann")["shownText"] == "before during "

    server = demo_server(port=server.port)
    for page in ("Ann", "Bob"):
        browser.call("wait", page=page, js="window.syncdDemo.state().status === 'open'")
    browser.call("type", page="Ann", text="after")
    final = wait_until(converged(browser, ("Ann", "Bob"), server.url, rm))
    assert final["text"] == "before during after"
    assert final["counter"] == 2
    # Both are back in the room.
    browser.call("wait", page="Bob", js=_presence_is(["Ann", "Bob"]))


def _clicks(button: str, times: int) -> str:
    return (
        f"(async () => {{ for (let i = 0; i < {times}; i++) {{"
        f" document.querySelector('[data-testid={button}]').click();"
        " await new Promise((r) => setTimeout(r, 5)); } })()"
    )


def _add_todos(items: list[str]) -> str:
    return (
        f"(async () => {{ for (const t of {json.dumps(items)}) {{"
        " const input = document.querySelector('[data-testid=todo-input]'); input.value = t;"
        " document.querySelector('[data-testid=todo-add]').click();"
        " await new Promise((r) => setTimeout(r, 5)); } })()"
    )


def _set_caret(index: int) -> str:
    return (
        "(() => { const t = document.querySelector('[data-testid=text]'); t.focus();"
        f" t.setSelectionRange({index}, {index}); }})()"
    )


def _presence_is(names: list[str]) -> str:
    return f"JSON.stringify(window.syncdDemo.state().presence.slice().sort()) === {json.dumps(json.dumps(sorted(names), separators=(',', ':')))}"


RICH = "[data-testid=rich] .ProseMirror"


def _rich(browser: Browser, page: str) -> dict[str, Any]:
    state: dict[str, Any] = browser.state(page)["rich"]
    return state


def test_two_rich_text_editors_see_each_others_text_and_cursors(
    browser: Browser, demo_server: Callable[..., Subprocess]
) -> None:
    """TipTap on a yd: document through the unmodified y-websocket provider:
    both windows type at once and end with the same text, which is also the
    server's, and each shows the other's caret with its name."""
    server = demo_server()
    rm = room()
    open_pair(browser, f"{server.url}/demo/?room={rm}")
    for page in ("Ann", "Bob"):
        browser.call("wait", page=page, js="window.syncdDemo.state().rich.synced")
    browser.call(
        "parallel", steps=[{"cmd": "focus", "page": p, "selector": RICH} for p in ("Ann", "Bob")]
    )
    browser.call(
        "parallel",
        steps=[
            {"cmd": "type", "page": "Ann", "text": "annotated by Ann ", "delay": 15},
            {"cmd": "type", "page": "Bob", "text": "and by Bob ", "delay": 15},
        ],
    )

    seen: list[Any] = []

    def same_text() -> Any:
        texts = {_rich(browser, p)["text"] for p in ("Ann", "Bob")}
        seen[:] = [texts]
        if len(texts) != 1:
            return None
        (text,) = texts
        # Two windows starting on an empty document may each make the first
        # paragraph: the text is then two paragraphs ("\n\n" between them).
        text = text.replace("\n", "")
        if len(text) != len("annotated by Ann ") + len("and by Bob "):
            return None
        served = read_state(server.url, f"yd:demo-doc-{rm}") or {}
        return text if served.get("seq") else None

    try:
        text = wait_until(same_text)
    except AssertionError:
        raise AssertionError(f"the editors show {seen}") from None
    # Nothing lost: every character both typed (where two first keystrokes
    # landed at once, Yjs orders them; the order is the same everywhere).
    assert sorted(text) == sorted("annotated by Ann " + "and by Bob ")
    # The server's document holds the same text (TipTap keeps it in an XML
    # fragment named "default": its text is the paragraphs' text).
    # (Not the words whole: a caret at the spot where the other window's
    # keystrokes land may move past them, so the typed runs can interleave.)
    served = read_state(server.url, f"yd:demo-doc-{rm}?root=default&as=xml")
    assert served is not None
    assert re.sub(r"<[^>]*>", "", served["value"]) == text
    # Cursors: each window shows the other's caret, labelled with its name.
    browser.call("wait", page="Bob", js="window.syncdDemo.state().rich.carets.includes('Ann')")
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.carets.includes('Bob')")
    # The caret is drawn: its colour is a real one (TipTap's caret extension
    # takes #rrggbb only, and warns on anything else), its label has a size.
    for page, other in (("Bob", "Ann"), ("Ann", "Bob")):
        looks = browser.call("eval", page=page, js=_caret_looks(other))
        assert looks["border"] not in ("", "rgba(0, 0, 0, 0)", "transparent"), looks
        assert looks["label"] not in ("", "rgba(0, 0, 0, 0)", "transparent"), looks
        assert looks["width"] > 0 and looks["height"] > 0, looks
    warnings = [line for line in browser.call("logs") if "unsupported color format" in line.lower()]
    assert warnings == []
    # The empty editor says it is one (a placeholder), so a visitor knows to type.
    browser.call("open", page="Cy", url=f"{server.url}/demo/?room={room()}&name=Cy")
    browser.call("wait", page="Cy", js="window.syncdDemo.state().rich.synced")
    placeholder = browser.call(
        "eval",
        page="Cy",
        js=(
            "(() => { const p = document.querySelector('[data-testid=rich] p.is-editor-empty');"
            " return p ? getComputedStyle(p, '::before').content : null; })()"
        ),
    )
    assert placeholder is not None and "Write here" in placeholder, placeholder


def _caret_looks(name: str) -> str:
    return (
        "(() => { const label = [...document.querySelectorAll('.collaboration-carets__label')]"
        f".find((l) => l.textContent === {json.dumps(name)});"
        " if (!label) return null;"
        " const caret = label.parentElement; const box = label.getBoundingClientRect();"
        " return { border: getComputedStyle(caret).borderLeftColor,"
        " label: getComputedStyle(label).backgroundColor,"
        " width: box.width, height: box.height }; })()"
    )
