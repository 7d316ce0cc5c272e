"""The sdist and the wheel are what PyPI accepts: `twine check --strict` passes on both."""

import sys
import tarfile
import zipfile
from email.parser import Parser

from tests.hostsite.conftest import run, wheel_requirements

CORE = {"django", "django-q2", "httpx"}
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
