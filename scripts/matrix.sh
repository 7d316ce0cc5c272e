#!/usr/bin/env bash
# The Django and Python matrix (noxfile.py): every supported combination but Django 5.2 on Python 3.11,
# which `make test` runs whole. Each runs the unit suite on SQLite and a task on a real qcluster.
#   scripts/matrix.sh                         # all of them, one after the other
#   scripts/matrix.sh -s django6.1-py3.13     # one (nox -l lists them); arguments go to nox
# The sessions' environments are kept in NOX_ENVDIR (default .nox) and reused by the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if ! "$PY" -m nox --version >/dev/null 2>&1; then
  echo "nox is not installed in $PY's environment: run 'make venv' (requirements.txt pins it)." >&2
  exit 1
fi
exec "$PY" -m nox --envdir "${NOX_ENVDIR:-.nox}" "$@"
