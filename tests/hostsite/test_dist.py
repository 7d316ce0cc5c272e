"""The sdist and the wheel are what PyPI accepts: `twine check --strict` passes on both."""

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser

import pytest

from tests.hostsite.conftest import run, wheel_requirements
from tools.processes import PROJECT_ROOT

CORE = {"django", "django-q2", "httpx"}
PACKAGES = ("weave", "notifications", "onboarding")
EXTRAS = {"fcm", "apns", "webpush", "onboarding", "metrics", "postgres", "testing"}


def test_sdist_and_wheel_pass_twine_check(dist):
    files = sorted(dist.iterdir())
    assert sorted(f.suffix for f in files) == [".gz", ".whl"], files
    out = run([sys.executable, "-m", "twine", "check", "--strict", *files])
    assert out.count("PASSED") == 2, out


def test_metadata_names_the_licence_the_extras_and_a_small_core(wheel):
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        fields = Parser().parsestr(archive.read(name).decode())
    assert fields["License-Expression"] == "BSD-3-Clause"
    assert "Typing :: Typed" in fields.get_all("Classifier")
    assert {url.split(",")[0] for url in fields.get_all("Project-URL")} >= {"Documentation", "Source", "Changelog"}
    assert EXTRAS <= set(fields.get_all("Provides-Extra"))
    core = {r.name.lower() for r in wheel_requirements(wheel) if r.marker is None}
    assert core == CORE


def test_sdist_carries_the_licence_and_changelog(dist):
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "weave/py.typed"} <= names


def test_wheel_carries_every_file_of_the_packages(wheel):
    """Every file of the three packages in the checkout ships: a module, template, static file or
    migration added later (or not yet committed) is found by `git`, not by a list kept by hand."""
    if shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PACKAGES],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    present = {name for name in listed if (PROJECT_ROOT / name).is_file()}  # not a file deleted but unstaged
    assert len(present) > 100 and "weave/jobs/runner.py" in present
    names = set(zipfile.ZipFile(wheel).namelist())
    assert sorted(present - names) == [], f"missing from {wheel.name}"
    shipped = {n for n in names if n.split("/", 1)[0] in PACKAGES}
    assert sorted(shipped - present) == [], f"in {wheel.name} but not in the checkout"
