"""The package as a user gets it: an sdist and a wheel built from a clean copy of the checkout, and a
view of this environment that holds only the distributions a chosen set of extras requires."""

import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools.processes import PROJECT_ROOT


def run(args, **kwargs) -> str:
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """A directory holding weave_jobs-<version>.tar.gz and weave_jobs-<version>-py3-none-any.whl."""
    out = tmp_path_factory.mktemp("dist")
    # Build from a clean copy: setuptools reuses a checkout's build/ directory, so a file renamed or
    # deleted since the last build (a renumbered migration) would otherwise still ship in the wheel.
    source = tmp_path_factory.mktemp("source") / "weave"
    shutil.copytree(
        PROJECT_ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", ".run", "__pycache__", "*.sqlite3*", ".hypothesis", "site"
        ),
    )
    # --no-isolation: build with this environment's setuptools instead of downloading one (offline).
    build_tmp = tmp_path_factory.mktemp("build")
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source],
        env={**os.environ, "TMPDIR": str(build_tmp)},
    )
    return out


@pytest.fixture(scope="session")
def wheel(dist) -> Path:
    (path,) = dist.glob("weave_jobs-*.whl")
    return path


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        fields = Parser().parsestr(archive.read(name).decode())
    return [Requirement(line) for line in fields.get_all("Requires-Dist") or []]


def _wanted(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras or {""})


def closure(requirements: list[Requirement], extras: frozenset[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution the requirements (with `extras`) need, transitively, by name."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, extras) for r in requirements]
    while todo:
        requirement, chosen = todo.pop()
        if not _wanted(requirement, chosen):
            continue
        name = canonicalize_name(requirement.name)
        if name == "weave-jobs":  # a self-referencing extra, e.g. testing = ["weave-jobs[fcm]"]
            todo += [(r, frozenset(requirement.extras)) for r in requirements]
            continue
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        distribution = found.get(name) or metadata.distribution(requirement.name)
        found[name] = distribution
        todo += [(Requirement(r), frozenset(requirement.extras)) for r in distribution.requires or []]
    return found


def environment_view(target: Path, distributions: dict[str, metadata.Distribution]) -> Path:
    """A directory of symlinks to the top-level modules (and metadata) of exactly these distributions."""
    target.mkdir(parents=True, exist_ok=True)
    for distribution in distributions.values():
        root = Path(str(distribution.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in distribution.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            link = target / top
            if not link.exists() and (root / top).exists():
                link.symlink_to(root / top)
    return target
