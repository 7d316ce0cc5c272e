#!/usr/bin/env bash
# The full chaos audit on PostgreSQL: N notifications, M onboarding runs, K qcluster process groups.
# The database (default weave_chaos) is created if missing and its job tables are emptied first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export DATABASE_URL=${CHAOS_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/weave_chaos}
# A local run against local fakes: development mode (local push defaults) unless the caller says otherwise.
export DEBUG=${DEBUG:-true}

if ! "$PY" scripts/pg_reachable.py "$DATABASE_URL"; then
  echo "PostgreSQL at $DATABASE_URL is not reachable; the chaos run needs it (set CHAOS_DATABASE_URL)." >&2
  exit 1
fi
"$PY" - "$DATABASE_URL" <<'PYCODE'
import sys

import dj_database_url
import psycopg
from psycopg import sql

db = dj_database_url.parse(sys.argv[1])
options = dict(user=db["USER"] or None, password=db["PASSWORD"] or None, host=db["HOST"] or None,
               port=db["PORT"] or None, autocommit=True)
with psycopg.connect(dbname="postgres", **options) as conn:
    if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone():
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
        print(f"Created database {db['NAME']}.")
PYCODE
exec "$PY" manage.py weave_chaos "$@"
