"""A throw-away PostgreSQL server for the JavaScript tests (tests/pgserver.py):
run from the repository with its Python, it prints one JSON line,
``{"url": ...}`` (a database URL) or ``{"missing": reason}``, then obeys a
line on stdin at a time: ``halt`` (an outage: the server stops, its data
kept), ``resume`` (started again), each answered ``ok``. At the end of
stdin the server is stopped and removed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: its tests package

from tests.pgserver import PostgresMissing, ThrowawayPostgres


def main() -> None:
    try:
        server = ThrowawayPostgres().start()
    except (PostgresMissing, RuntimeError, OSError) as exc:
        print(json.dumps({"missing": str(exc)}), flush=True)
        return
    try:
        print(json.dumps({"url": f"{server.url}/postgres"}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "halt":
                server.halt()
            elif command == "resume":
                server.resume()
            print("ok", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
