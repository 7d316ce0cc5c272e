#!/usr/bin/env bash
# Run the suite on SQLite, then on PostgreSQL.
# PostgreSQL comes from DATABASE_URL (if it is a postgres:// URL) or 127.0.0.1:5432, user postgres.
# When it cannot be reached: one line says so and only SQLite runs, unless CI=true, where that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

pg_url=${DATABASE_URL:-}
case "$pg_url" in
  postgres://*|postgresql://*) ;;
  *) pg_url="postgres://postgres@127.0.0.1:5432/weave" ;;
esac

echo "== tests on SQLite"
DATABASE_URL="sqlite:///$PWD/db.sqlite3" "$PY" -m pytest "$@"

if "$PY" scripts/pg_reachable.py "$pg_url"; then
  echo "== tests on PostgreSQL ($pg_url)"
  DATABASE_URL="$pg_url" "$PY" -m pytest "$@"
elif [ "${CI:-}" = "true" ]; then
  echo "PostgreSQL at $pg_url is not reachable, and CI=true requires the PostgreSQL run." >&2
  exit 1
else
  echo "PostgreSQL at $pg_url is not reachable: ran SQLite only (set DATABASE_URL to test PostgreSQL)."
fi
