#!/usr/bin/env bash
# The demo: migrate the SQLite default, create an admin login and demo data, then start the site,
# qcluster and the two fake services (mild faults on). Ctrl-C stops everything this script started
# (each child runs in its own process group).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export DATABASE_URL=${DATABASE_URL:-sqlite:///$PWD/db.sqlite3}
PORT=${PORT:-8000}
PUSH_PORT=${PUSH_PORT:-8100}
SUPPLIER_PORT=${SUPPLIER_PORT:-8200}
export WEAVE_PUSH_URL=${WEAVE_PUSH_URL:-http://127.0.0.1:$PUSH_PORT/push}
export WEAVE_SUPPLIER_API_URL=${WEAVE_SUPPLIER_API_URL:-http://127.0.0.1:$SUPPLIER_PORT}
ADMIN_USER=${ADMIN_USER:-admin}
ADMIN_PASSWORD=${ADMIN_PASSWORD:-weave-demo}
LOGS=.run/demo
mkdir -p "$LOGS"

"$PY" manage.py migrate --noinput
"$PY" manage.py weave_demo_user --username "$ADMIN_USER" --password "$ADMIN_PASSWORD"
"$PY" manage.py weave_schedules

pids=()
start() {  # start a child in its own process group, remember its pgid; $1 names its log file
  local name=$1; shift
  setsid "$@" >"$LOGS/$name.log" 2>&1 &
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

# Mild faults, so the admin shows retries and `unknown` attempts next to deliveries.
start fake_push "$PY" manage.py fake_push_provider --port "$PUSH_PORT" --latency-ms 150 \
  --rate-5xx 0.05 --rate-429 0.03 --retry-after 2 --rate-hang 0.01 --hang-seconds 12
# FCM, APNs and Web Push fakes (HTTP/2 over TLS, keys generated into $LOGS/push-fakes); the site reads
# the PUSH_BACKENDS they write once they are up.
rm -f "$LOGS/push-fakes/push_backends.json"
start fake_providers "$PY" manage.py fake_push_services --dir "$LOGS/push-fakes" --latency-ms 120
for _ in $(seq 1 100); do [ -f "$LOGS/push-fakes/push_backends.json" ] && break; sleep 0.1; done
export WEAVE_PUSH_BACKENDS_FILE="$PWD/$LOGS/push-fakes/push_backends.json"
# Faulty Fixtures Co's account is closed (demo/management/commands/weave_demo_data.py: CLOSED_ACCOUNT_IBAN).
start fake_supplier "$PY" manage.py fake_supplier_services --port "$SUPPLIER_PORT" --latency 0.8 \
  --error-rate 0.05 --throttle-rate 0.03 --refused-iban DE91370400440000004242
start runserver "$PY" manage.py runserver "127.0.0.1:$PORT" --noreload
start qcluster "$PY" manage.py qcluster
"$PY" manage.py weave_demo_data

cat <<MSG

  Weave demo is running.
    Admin:  http://127.0.0.1:$PORT/admin/
    Login:  $ADMIN_USER / $ADMIN_PASSWORD

  What to click:
    1. Supplier onboarding > Suppliers: tick a few suppliers, choose "Start onboarding", press Go.
    2. Supplier onboarding > Onboarding runs: open a run and reload; receipts and attempts appear
       step by step. "Faulty Fixtures Co" ends failed: its bank account is refused.
    3. Push notifications > Notifications: the demo notifications and each supplier's welcome
       message, with their delivery attempts (a few retries: the fake provider has faults on).
    4. Push notifications > Devices: the admin's devices on FCM, APNs and Web Push; the dead ones
       were deactivated by the provider's answer. Tick some, "Send test notification", press Go.
  Fake services: http://127.0.0.1:$PUSH_PORT/_stats and http://127.0.0.1:$SUPPLIER_PORT/_stats
  Logs: $LOGS/.  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
