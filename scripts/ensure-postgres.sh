#!/usr/bin/env bash
# Make sure the local PostgreSQL is up and ready for the cluster tests:
# wal_level=logical (the replication stream) and enough replication slots.
# Tests that need PostgreSQL run in CI, they never skip; this script is why.
set -euo pipefail
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}

psql_q() { psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -Atqc "$1"; }

start_cluster() {
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || true
  fi
}

wait_up() {
  for _ in $(seq 1 60); do
    pg_isready -h "$PGHOST" -p "$PGPORT" -q && return 0
    sleep 0.5
  done
  return 1
}

if ! command -v psql >/dev/null 2>&1; then
  echo "ensure-postgres: psql not found; install PostgreSQL (apt-get install postgresql)" >&2
  exit 1
fi
pg_isready -h "$PGHOST" -p "$PGPORT" -q || start_cluster
wait_up || { echo "ensure-postgres: PostgreSQL is not reachable on $PGHOST:$PGPORT" >&2; exit 1; }

restart=no
if [ "$(psql_q 'SHOW wal_level')" != "logical" ]; then
  psql_q "ALTER SYSTEM SET wal_level = logical" >/dev/null
  restart=yes
fi
if [ "$(psql_q 'SHOW max_replication_slots')" -lt 20 ]; then
  psql_q "ALTER SYSTEM SET max_replication_slots = 32" >/dev/null
  restart=yes
fi
if [ "$(psql_q 'SHOW max_wal_senders')" -lt 20 ]; then
  psql_q "ALTER SYSTEM SET max_wal_senders = 32" >/dev/null
  restart=yes
fi
if [ "$restart" = yes ]; then
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  else
    psql_q "SELECT pg_reload_conf()" >/dev/null
  fi
  wait_up
fi
psql_q "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 || psql_q "CREATE DATABASE test" >/dev/null
echo "ensure-postgres: ready (wal_level=$(psql_q 'SHOW wal_level'))"
