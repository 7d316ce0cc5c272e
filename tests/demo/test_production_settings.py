"""demo/settings.py: production by default, a clear stop without secrets, `check --deploy` clean as documented.

Each case starts `manage.py` in a fresh process with a controlled environment, as a deployment would.
"""

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The production environment docs/operations/deploy.md documents (PostgreSQL is not contacted by these checks).
PRODUCTION = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "weave.example.com",
    "DATABASE_URL": "postgres://weave@db.example.com:5432/weave",
    "WEAVE_PUSH_URL": "https://push.example.com/send",
    "WEAVE_PUSH_TOKEN": "provider-token-from-the-vault",
    "WEAVE_SUPPLIER_API_URL": "https://suppliers.example.com",
}
# Variables of the calling shell that would change what is tested here.
CLEARED = ("DEBUG", "SECRET_KEY", "WEAVE_PUSH_URL", "WEAVE_PUSH_TOKEN", "DJANGO_SETTINGS_MODULE", "DATABASE_URL")


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("SECURE_")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "demo.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_debug_is_off_unless_the_environment_turns_it_on():
    code = "from django.conf import settings; print(settings.DEBUG)"
    assert manage("shell", "-c", code, **PRODUCTION).stdout.strip().splitlines()[-1] == "False"
    assert manage("shell", "-c", code, **PRODUCTION, DEBUG="true").stdout.strip().splitlines()[-1] == "True"


def test_a_production_start_without_secret_key_or_push_credentials_stops_with_a_clear_message():
    for missing in ("SECRET_KEY", "WEAVE_PUSH_TOKEN", "WEAVE_PUSH_URL"):
        env = {k: v for k, v in PRODUCTION.items() if k != missing}
        result = manage("check", **env)
        assert result.returncode != 0
        assert "ImproperlyConfigured" in result.stderr and missing in result.stderr
        assert "DEBUG is off" in result.stderr


def test_check_deploy_is_clean_when_configured_as_the_readme_says():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_fallback_secret_key_of_a_local_run_is_flagged_by_check_deploy():
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    result = manage("check", "--deploy", **env, DEBUG="true")
    assert "security.W009" in result.stdout + result.stderr
