"""Import demo/settings.py in a fresh process under a given environment, as a worker process would."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PRINT_WEAVE = "import json, demo.settings as s; print(json.dumps(s.WEAVE, default=list))"


def run_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    """Import `demo.settings` with the calling environment's WEAVE_* variables replaced by `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("WEAVE_") and k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, "-c", _PRINT_WEAVE],
        cwd=ROOT,
        env={**base, "DEBUG": "true", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def weave_settings_under(env: dict[str, str]) -> dict:
    """The site's `WEAVE` dict as demo/settings.py builds it from `env`."""
    done = run_settings(env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
