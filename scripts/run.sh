#!/usr/bin/env bash
# The demo: migrate the SQLite default, create an admin login, start the site and qcluster.
# Ctrl-C stops everything this script started (each child runs in its own process group).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export DATABASE_URL=${DATABASE_URL:-sqlite:///$PWD/db.sqlite3}
PORT=${PORT:-8000}
ADMIN_USER=${ADMIN_USER:-admin}
ADMIN_PASSWORD=${ADMIN_PASSWORD:-weave-demo}

"$PY" manage.py migrate --noinput
"$PY" manage.py weave_demo_user --username "$ADMIN_USER" --password "$ADMIN_PASSWORD"

pids=()
start() {  # start a child in its own process group, remember its pgid
  setsid "$@" &
  pids+=($!)
}
stop_all() {
  trap - INT TERM EXIT
  echo; echo "Stopping..."
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  sleep 2
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

start "$PY" manage.py runserver "127.0.0.1:$PORT" --noreload
start "$PY" manage.py qcluster

cat <<MSG

  Weave demo is running.
    Admin:  http://127.0.0.1:$PORT/admin/
    Login:  $ADMIN_USER / $ADMIN_PASSWORD
  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
