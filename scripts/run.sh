#!/usr/bin/env bash
# The demo: migrate the SQLite default, create an admin login and demo data, then start the site,
# qcluster and the two fake services (mild faults on). Ctrl-C stops everything this script started
# (each child runs in its own process group).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export DATABASE_URL=${DATABASE_URL:-sqlite:///$PWD/db.sqlite3}
# The demo is a local run: development mode unless the caller says otherwise.
export DEBUG=${DEBUG:-true}
# Every port can be set (docs/contributing.md, "The demo's ports"): the site, the webhook push fake, the
# supplier fake, and the FCM, APNs and Web Push fakes.
PORT=${PORT:-8000}
PUSH_PORT=${PUSH_PORT:-8100}
FCM_PORT=${FCM_PORT:-8101}
APNS_PORT=${APNS_PORT:-8102}
WEBPUSH_PORT=${WEBPUSH_PORT:-8103}
SUPPLIER_PORT=${SUPPLIER_PORT:-8200}
export WEAVE_PUSH_URL=${WEAVE_PUSH_URL:-http://127.0.0.1:$PUSH_PORT/push}
export WEAVE_SUPPLIER_API_URL=${WEAVE_SUPPLIER_API_URL:-http://127.0.0.1:$SUPPLIER_PORT}
# A short onboarding lease, so a stalled worker (weave_demo_stalls below) is taken over within seconds.
export WEAVE_ONBOARDING_LEASE_TTL=${WEAVE_ONBOARDING_LEASE_TTL:-10}
ADMIN_USER=${ADMIN_USER:-admin}
ADMIN_PASSWORD=${ADMIN_PASSWORD:-weave-demo}
LOGS=.run/demo
mkdir -p "$LOGS"

"$PY" manage.py migrate --noinput
"$PY" manage.py weave_demo_user --username "$ADMIN_USER" --password "$ADMIN_PASSWORD"
"$PY" manage.py weave_schedules >/dev/null  # migrate has set them up already; this only checks

pids=()
start() {  # start a child in its own process group, remember its pgid; $1 names its log file
  local name=$1; shift
  setsid "$@" >"$LOGS/$name.log" 2>&1 &
  pids+=($!)
}
qcluster_pid=""
stop_all() {
  trap - INT TERM EXIT
  echo; echo "Stopping..."
  # qcluster first, and only its main process: SIGTERM to its whole group makes django-q2 hang and
  # cuts in-flight tasks off (see deploy/weave-qcluster.service). Its workers finish their tasks, then
  # it exits; the fakes and the site stay up meanwhile so that those tasks can complete.
  if [ -n "$qcluster_pid" ] && kill -TERM "$qcluster_pid" 2>/dev/null; then
    echo "Waiting for qcluster to finish its in-flight tasks..."
    for _ in $(seq 1 150); do  # bounded: at most ~150 s, above Q_CLUSTER's task timeout
      kill -0 "$qcluster_pid" 2>/dev/null || break
      sleep 1
    done
  fi
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  sleep 2
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

# The apps' own fake commands (the ones a host site's tests use). Mild faults on the webhook fake, so the
# admin shows retries and `unknown` attempts next to deliveries.
start fake_push "$PY" manage.py weave_fake_push --serve webhook --port "$PUSH_PORT" --dir "$LOGS/push-webhook" \
  --latency-ms 150 --rate-5xx 0.12 --rate-429 0.06 --retry-after 2 --rate-hang 0.01 --hang-seconds 12
# FCM, APNs and Web Push fakes (HTTP/2 over TLS, keys generated into $LOGS/push-fakes); the site reads
# the PUSH_BACKENDS they write once they are up.
rm -f "$LOGS/push-fakes/push_backends.json"
start fake_providers "$PY" manage.py weave_fake_push --serve http2 --dir "$LOGS/push-fakes" --latency-ms 120 \
  --fcm-port "$FCM_PORT" --apns-port "$APNS_PORT" --webpush-port "$WEBPUSH_PORT"
for _ in $(seq 1 100); do [ -f "$LOGS/push-fakes/push_backends.json" ] && break; sleep 0.1; done
export WEAVE_PUSH_BACKENDS_FILE="$PWD/$LOGS/push-fakes/push_backends.json"
# Faulty Fixtures Co's account is closed (demo/management/commands/weave_demo_data.py: CLOSED_ACCOUNT_IBAN).
start fake_supplier "$PY" manage.py weave_fake_suppliers --port "$SUPPLIER_PORT" --latency 0.8 \
  --error-rate 0.05 --throttle-rate 0.03 --refused-iban DE91370400440000004242
start runserver "$PY" manage.py runserver "127.0.0.1:$PORT" --noreload
start qcluster "$PY" manage.py qcluster
qcluster_pid=${pids[-1]}  # setsid execs in place here, so this is qcluster's main pid (and its pgid)
# Now and then freeze the worker holding a run past its lease: its attempt ends blocked, with the reason.
# The first after 12 s, on the run the demo operator starts (below); the second, 12 s after that, on a push
# worker holding notifications the stall queues itself; then about every STALL_EVERY s, alternating.
start stalls "$PY" manage.py weave_demo_stalls --every "${STALL_EVERY:-40}" --first-after 12
# Now and then a few seconds of provider outage: a push worker's breaker opens, its rows wait and go out.
start outage "$PY" manage.py weave_demo_outage --provider "http://127.0.0.1:$PUSH_PORT" --every "${OUTAGE_EVERY:-60}"
"$PY" manage.py weave_demo_data
# A scripted operator (user demo-operator): starts one supplier's onboarding after 8 s, and fixes and
# retries the failed run 15 s after it failed, through the admin's own services and history.
start operator "$PY" manage.py weave_demo_operator

cat <<MSG

  Weave demo is running.
    Admin:  http://127.0.0.1:$PORT/admin/
    Login:  $ADMIN_USER / $ADMIN_PASSWORD

  Dashboard: http://127.0.0.1:$PORT/admin/weave/dashboard/   Metrics: http://127.0.0.1:$PORT/metrics (staff)

  What happens by itself within two minutes (watch the dashboard's verdict):
    - "Faulty Fixtures Co" is onboarded by demo-operator, a scripted user, and fails at the bank
      account step (its account is closed); 15 s later demo-operator corrects its IBAN and retries the
      run with a note; it resumes after its last receipt and completes.
    - after 8 s demo-operator starts onboarding for one more supplier; a demo fault freezes the worker
      holding it (about every ${STALL_EVERY:-40} s, alternating with a push worker holding notifications):
      a stuck, then expired lease, a takeover under the next fence, a blocked or lease_lost attempt.
    - after 20 s, and about every ${OUTAGE_EVERY:-60} s, the fake provider answers 503 for 8 s: retries,
      a breaker opening and the backlog tied to it, then deliveries.

  What to click:
    1. Weave > Dashboard: the verdict first (healthy, degraded or failing, with the reasons, each
       linked to its rows), then the panels: push notifications, onboarding, leases, workers, TTL.
    2. Supplier onboarding > Onboarding runs: open run 1 (Faulty Fixtures Co): its timeline shows the
       failure, "reopened by demo-operator" with the note, and the completing attempt. Open a supplier
       without a run, press "Start onboarding"; receipts and attempts appear step by step.
    3. Push notifications > Notifications: reasons beside each status, delivery attempts on each page;
       actions that cannot apply to a row are shown disabled with the reason.
    4. Push notifications > Devices: the admin's devices on FCM, APNs and Web Push; the dead ones
       were deactivated by the provider's answer. Tick some, "Send test notification", press Go.
  Fake services: http://127.0.0.1:$PUSH_PORT/_stats and http://127.0.0.1:$SUPPLIER_PORT/_stats; FCM, APNs
  and Web Push fakes on https://127.0.0.1:$FCM_PORT, :$APNS_PORT and :$WEBPUSH_PORT.
  Ports: PORT, PUSH_PORT, SUPPLIER_PORT, FCM_PORT, APNS_PORT, WEBPUSH_PORT (e.g. PORT=9000 make run).
  Logs: $LOGS/.  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
