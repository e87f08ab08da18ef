"""``syncd token``: a token issued offline, and every refusal as one line."""

from __future__ import annotations

import time

import pytest

from syncd.auth import (
    DEFAULT_TTL_MS,
    Rule,
    SigningKey,
    V1Permissions,
    V2Permissions,
    verify_token,
)
from syncd.cli import main

KEY_HEX = "11" * 32


def run_cli(
    argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    code = main(["token", *argv], env)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_v1(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--namespace",
        "demo",
        "--client-id",
        "42",
        "--read",
        "*",
        "--write",
        "gc:*",
        "--write",
        "or:*",
        "--admin",
    ]
    code, out, err = run_cli(argv, {"SERVICE_SIGNING_KEY": KEY_HEX}, capsys)
    assert (code, err) == (0, "")
    claims, _ = verify_token(out.strip(), SigningKey.from_hex(KEY_HEX))
    assert claims.namespace == "demo" and claims.client_id == 42
    assert claims.permissions == V1Permissions(("*",), ("gc:*", "or:*"), True)
    # Stamped like the server's tokens, so revocations apply to it.
    assert claims.issued_at is not None
    assert abs(claims.issued_at - time.time_ns() // 1_000_000) < 60_000
    assert claims.expires_at == claims.issued_at + DEFAULT_TTL_MS


def test_cli_help_says_what_revocation_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "--help"], {}) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "issued_at" in out and "token_revoked" in out


def test_cli_help_says_the_default_lifetime(capsys: pytest.CaptureFixture[str]) -> None:
    """``--ttl-ms``'s help writes the default out (``TTL_HELP``, so that the
    command line need not import the token issuer): it must be the issuer's."""
    assert main(["token", "--help"], {}) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"lifetime, default {DEFAULT_TTL_MS}" in out


def test_cli_v2_and_ttl(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--namespace",
        "demo",
        "--client-id",
        "1",
        "--ttl-ms",
        "5000",
        "--rules",
        '{"r":[{"p":"*"}],"w":[],"rl":3}',
    ]
    code, out, _ = run_cli(argv, {"SERVICE_SIGNING_KEY": KEY_HEX}, capsys)
    assert code == 0
    claims, _ = verify_token(out.strip(), SigningKey.from_hex(KEY_HEX))
    assert claims.permissions == V2Permissions((Rule("*"),), (), 3)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--namespace", "demo", "--client-id", "1"], {}),
        (["--namespace", "demo", "--client-id", "1"], {"SERVICE_SIGNING_KEY": ""}),
        (["--namespace", "demo", "--client-id", "1"], {"SERVICE_SIGNING_KEY": "abc"}),
        (["--namespace", "demo", "--client-id", "1"], {"SERVICE_SIGNING_KEY": "zz" * 32}),
        (["--client-id", "1"], {"SERVICE_SIGNING_KEY": KEY_HEX}),
        (["--namespace", "demo", "--client-id", "x"], {"SERVICE_SIGNING_KEY": KEY_HEX}),
        (["--namespace", "demo", "--client-id", "1", "--bogus"], {"SERVICE_SIGNING_KEY": KEY_HEX}),
        (
            [
                "--namespace",
                "demo",
                "--client-id",
                "1",
                "--rules",
                "{",
            ],
            {"SERVICE_SIGNING_KEY": KEY_HEX},
        ),
        (
            ["--namespace", "demo", "--client-id", "1", "--rules", "{}", "--read", "*"],
            {"SERVICE_SIGNING_KEY": KEY_HEX},
        ),
        (
            ["--namespace", "demo", "--client-id", "1", "--rules", '{"r": "*"}'],
            {"SERVICE_SIGNING_KEY": KEY_HEX},
        ),
        (["--namespace", "../x", "--client-id", "1"], {"SERVICE_SIGNING_KEY": KEY_HEX}),
        (["--namespace", "demo", "--client-id", "-1"], {"SERVICE_SIGNING_KEY": KEY_HEX}),
        (
            ["--namespace", "demo", "--client-id", "1", "--ttl-ms", "0"],
            {"SERVICE_SIGNING_KEY": KEY_HEX},
        ),
        (
            ["--namespace", "demo", "--client-id", "1", "--ttl-ms", "5000"],
            {"SERVICE_SIGNING_KEY": KEY_HEX, "SERVICE_MAX_TOKEN_TTL_MS": "1000"},
        ),
        (
            ["--namespace", "demo", "--client-id", "1"],
            {"SERVICE_SIGNING_KEY": KEY_HEX, "SERVICE_MAX_TOKEN_TTL_MS": "lots"},
        ),
        (["--namespace", "demo", "--client-id", "1"], {"SERVICE_SIGNING_KEY": KEY_HEX}),
    ],
)
def test_cli_refusals(
    argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(argv, env, capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("syncd token: ")
    assert err.count("\n") == 1
    if env.get("SERVICE_SIGNING_KEY"):
        assert env["SERVICE_SIGNING_KEY"] not in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--namespace", "d\udcffmo"),
        ("--read", "gc:\udcff"),
        ("--write", "\udcff"),
        ("--rules", '{"r":[{"p":"\udcff"}],"w":[]}'),
    ],
)
def test_an_argument_that_is_not_utf8_is_named(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # What Python makes of the bytes of `--read $'\xff'` on a UTF-8 system.
    argv = ["--namespace", "demo", "--client-id", "1", "--read", "*"]
    if flag == "--namespace":
        argv[1] = value
    elif flag == "--rules":
        argv = [*argv[:4], flag, value]
    else:
        argv += [flag, value]
    code, out, err = run_cli(argv, {"SERVICE_SIGNING_KEY": KEY_HEX}, capsys)
    assert (code, out) == (2, "")
    assert err == f"syncd token: {flag} is not valid UTF-8\n"


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--help"], {}, capsys)
    assert code == 0
    assert "--namespace" in out


def test_a_token_that_grants_nothing_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["--namespace", "demo", "--client-id", "1"], {"SERVICE_SIGNING_KEY": KEY_HEX}, capsys
    )
    assert (code, out) == (2, "")
    assert err == (
        "syncd token: the token would grant nothing: give --read GLOB and/or --write GLOB "
        "(or --admin, or --rules)\n"
    )
    for rules in (
        "{}",
        '{"r":[],"w":[]}',
        '{"w":[{"p":"*","o":0}],"rl":5}',
        '{"r":[{"p":"*","e":1767225600}]}',  # e in seconds: long past, in ms
    ):
        code, out, err = run_cli(
            ["--namespace", "demo", "--client-id", "1", "--rules", rules],
            {"SERVICE_SIGNING_KEY": KEY_HEX},
            capsys,
        )
        assert (code, out) == (2, ""), rules
        assert err.startswith("syncd token: rules: the token would grant nothing: "), err
        assert err.count("\n") == 1, err
    code, out, err = run_cli(
        ["--namespace", "demo", "--client-id", "1", "--read", ""],
        {"SERVICE_SIGNING_KEY": KEY_HEX},
        capsys,
    )
    assert (code, out) == (2, "") and "would grant nothing" in err
    for grant in (
        ["--read", "*"],
        ["--write", "gc:*"],
        ["--admin"],
        ["--rules", '{"r":[{"p":"gc:one"}],"w":[]}'],
        ["--rules", '{"w":[{"p":"or:cart-{clientId}","o":1}]}'],
    ):
        code, out, _ = run_cli(
            ["--namespace", "demo", "--client-id", "1", *grant],
            {"SERVICE_SIGNING_KEY": KEY_HEX},
            capsys,
        )
        assert code == 0 and out.count(".") == 1, grant
