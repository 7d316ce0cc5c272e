#!/usr/bin/env bash
# Run the suite on SQLite, then on PostgreSQL (`make test` runs scripts/test-deps.sh first, and sets CI=true
# unless told otherwise, so a test that misses a tool fails instead of being skipped).
# PostgreSQL comes from DATABASE_URL (if it is a postgres:// URL) or 127.0.0.1:5432, user postgres. When
# nothing listens on 127.0.0.1:5432 and that is where the run goes, a throwaway cluster is started there
# for the run and removed after it. When PostgreSQL still cannot be reached: one line says so and only
# SQLite runs, unless CI=true, where that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

pg_url=${DATABASE_URL:-}
case "$pg_url" in
  postgres://*|postgresql://*) ;;
  *) pg_url="postgres://postgres@127.0.0.1:5432/weave" ;;
esac

pg_tmp=""
run_as=()
cleanup() {
  if [ -n "$pg_tmp" ]; then
    "${run_as[@]}" "$pg_bin/pg_ctl" -D "$pg_tmp/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$pg_tmp"
  fi
}
trap cleanup EXIT

local_pg=false
case "$pg_url" in
  *@127.0.0.1:5432/*|*@localhost:5432/*|*@127.0.0.1/*|*@localhost/*) local_pg=true ;;
esac
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if $local_pg && [ -n "$pg_bin" ] && ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  pg_tmp=$(mktemp -d)
  echo "Nothing listens on 127.0.0.1:5432: starting a throwaway PostgreSQL from $pg_bin"
  if [ "$(id -u)" = 0 ]; then
    # initdb refuses to run as root: hand the directory to the postgres system user.
    chown postgres "$pg_tmp"
    run_as=(runuser -u postgres --)
  fi
  "${run_as[@]}" "$pg_bin/initdb" -D "$pg_tmp/data" -U postgres --auth=trust >/dev/null
  "${run_as[@]}" "$pg_bin/pg_ctl" -D "$pg_tmp/data" -l "$pg_tmp/log" -w \
    -o "-h 127.0.0.1 -p 5432 -k $pg_tmp -c max_connections=200" start
fi

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
