"""The supported Django and Python combinations, one nox session each (docs/contributing.md).

    nox -l                          # the sessions
    nox                             # every combination but the one `make test` runs whole
    nox -s "django6.1-py3.13"       # one combination
    nox -s "django6.1-py3.13" -- -k admin    # arguments after -- go to the unit run's pytest

`make test` runs the whole suite on Django 5.2 and Python 3.11 (the project's own .venv). Every other
combination runs here: the unit suite on SQLite (UNIT below), then one end-to-end run of `@task`
functions on a real qcluster (E2E), with any deprecation warning from Django raised as an error.

Each session installs from the package index with pip: requirements.txt's pins, less the tooling the
unit suite never runs (TOOLING), with the Django line's own pins from requirements/django<line>.txt
in place of requirements.txt's Django and django-tasks (5.2 keeps requirements.txt's).
"""

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

# A session's environment is kept between runs (pip brings its pins up to date each time).
nox.options.reuse_venv = "yes"
# A combination whose Python is missing fails the run: never a silent skip.
nox.options.error_on_missing_interpreters = True

# Django line -> Python versions. Django 6 needs Python 3.12 or later.
MATRIX = {"5.2": ("3.11", "3.12", "3.13"), "6.0": ("3.12", "3.13"), "6.1": ("3.12", "3.13")}
# `make test` runs the whole suite on this one, on SQLite and PostgreSQL: its session is not a default.
WHOLE_SUITE = ("5.2", "3.11")

# The unit suite: every test except those that start qcluster/HTTP server processes (e2e), drive a browser
# or simulate hosts, and except the tooling's own tests (tests/tools: the docs build, the mutation runner,
# the benchmarks' scripts; tests/hostsite: the wheel build), which do not depend on Django's version.
UNIT = ("-m", "not e2e and not browser and not hosts", "--ignore=tests/tools", "--ignore=tests/hostsite")
# The end-to-end run: `@task` functions through weave.tasks.WeaveBackend on a real qcluster.
E2E = ("-m", "e2e", "tests/e2e/test_tasks_qcluster.py")

# requirements.txt lines a unit run never uses: lint, types, docs, the browser driver and nox itself.
TOOLING = {"mypy", "django-stubs", "types-pyyaml", "import-linter", "ruff", "playwright", "mkdocs", "twine", "nox"}
# Replaced by a Django line's own requirements file.
DJANGO_PINS = {"django", "django-tasks"}

# Lists the deprecation warning classes of the installed Django (their names change with each release).
LIST_DEPRECATIONS = """
import django.utils.deprecation as d
for name, value in sorted(vars(d).items()):
    if isinstance(value, type) and issubclass(value, (DeprecationWarning, PendingDeprecationWarning)):
        print(name)
"""


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", ""], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _find_interpreters() -> None:
    """Put pyenv's interpreters on PATH for the versions PATH cannot run (a pyenv shim may not run one)."""
    versions = ROOT_PYENV / "versions"
    for version in sorted({v for pythons in MATRIX.values() for v in pythons}):
        found = shutil.which(f"python{version}")
        if found and _runs(found):
            continue
        candidates = sorted(versions.glob(f"{version}.*/bin/python{version}"), key=_version_key)
        if candidates:
            os.environ["PATH"] = f"{candidates[-1].parent}{os.pathsep}{os.environ.get('PATH', '')}"


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.parent.name))


ROOT_PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
_find_interpreters()


def _requirement_name(line: str) -> str | None:
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
        return None
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
    return match.group(0).lower().replace("_", "-") if match else None


def _requirements(session: nox.Session, django: str) -> list[str]:
    """pip arguments: requirements.txt's pins for the unit suite, with the Django line's own in place."""
    own = ROOT / "requirements" / f"django{django.replace('.', '')}.txt"
    leave_out = TOOLING | (DJANGO_PINS if own.exists() else set())
    kept = [
        line
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if _requirement_name(line) is not None and _requirement_name(line) not in leave_out
    ]
    path = Path(session.create_tmp()) / "requirements.txt"
    path.write_text("\n".join(kept) + "\n")
    return ["-r", str(path), *(["-r", str(own)] if own.exists() else [])]


def _django_deprecations_as_errors(session: nox.Session) -> list[str]:
    """pytest -W options that turn each of the installed Django's deprecation warnings into an error."""
    names = session.run("python", "-c", LIST_DEPRECATIONS, silent=True, external=False)
    assert isinstance(names, str) and names.split(), "no deprecation warning class found in Django"
    return [f"-Werror::django.utils.deprecation.{name}" for name in names.split()]


def _combination(django: str, python: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        started = time.monotonic()
        session.install(*_requirements(session, django))
        installed = session.run("python", "-c", "import django; print(django.__version__)", silent=True)
        if installed is None:
            return  # nox --install-only
        assert isinstance(installed, str) and installed.strip().startswith(django + "."), installed
        warnings = _django_deprecations_as_errors(session)
        # SQLite, whatever DATABASE_URL the caller has: the test database is test_db.sqlite3 in the checkout,
        # as in `make test` (demo.settings), so a matrix run and `make test` take turns in one checkout.
        env = {"DATABASE_URL": f"sqlite:///{Path(session.create_tmp()) / 'db.sqlite3'}", "PYTHONDONTWRITEBYTECODE": "1"}
        session.run("python", "-m", "pytest", "-p", "no:cacheprovider", *UNIT, *warnings, *session.posargs, env=env)
        session.run("python", "-m", "pytest", "-p", "no:cacheprovider", *E2E, *warnings, env=env)
        session.log(f"Django {installed.strip()} on Python {python}: {time.monotonic() - started:.0f} s")

    run.__doc__ = f"Django {django} on Python {python}: the unit suite on SQLite and a task on a real qcluster."
    return run


for _django, _pythons in MATRIX.items():
    for _python in _pythons:
        nox.session(
            _combination(_django, _python),
            python=_python,
            name=f"django{_django}-py{_python}",
            default=(_django, _python) != WHOLE_SUITE,
            download_python="never",
        )
