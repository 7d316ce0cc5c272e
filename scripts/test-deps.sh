#!/usr/bin/env bash
# What the tests need besides .venv, set up on a fresh machine (`make test` runs this first; each step is
# skipped when already done): the Debian packages the tests drive (Chromium for the browser tests,
# pgbouncer and libfaketime for the operations tests, a C compiler for tools/clockwait_shim.c, Redis,
# PostgreSQL's server when none is installed), axe-core for the browser tests' accessibility checks
# (npm, pinned in tests/e2e/package.json), and a Redis server on 127.0.0.1:6379 when nothing listens
# there. Installing needs root or sudo. PostgreSQL itself is started by scripts/test.sh for the run.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=""
apt_install() {
  local as=()
  [ "$(id -u)" = 0 ] || as=(sudo)
  if [ -z "$apt_updated" ]; then
    "${as[@]}" apt-get update -qq
    apt_updated=1
  fi
  "${as[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# PostgreSQL's server binaries: scripts/test.sh starts a throwaway cluster when nothing listens on 5432,
# and some tests start servers of their own (tools/pgserver.py).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[ -f tests/e2e/node_modules/axe-core/axe.min.js ] || command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing Debian's ${missing[*]} for the tests"
  apt_install "${missing[@]}"
fi

if [ ! -f tests/e2e/node_modules/axe-core/axe.min.js ]; then
  echo "Installing axe-core for the browser tests (npm ci in tests/e2e)"
  (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
fi

# Redis, for the tests on django-q2's Redis broker (several clusters, lost drains, an unreachable broker).
if ! listening 6379; then
  echo "Nothing listens on 127.0.0.1:6379: starting redis-server"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 50); do
    listening 6379 && break
    sleep 0.1
  done
  listening 6379 || { echo "redis-server did not start on 127.0.0.1:6379" >&2; exit 1; }
fi
