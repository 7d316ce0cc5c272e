"""The Django and Python matrix (noxfile.py) and what the package says it supports are the same thing."""

import ast
import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tools.processes import PROJECT_ROOT


def _noxfile_constant(name: str):
    tree = ast.parse((PROJECT_ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(name)


MATRIX: dict[str, tuple[str, ...]] = _noxfile_constant("MATRIX")
PROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]


def _pin(path, name: str) -> Version:
    for line in path.read_text().splitlines():
        if match := re.fullmatch(rf"{name}==(\S+)", line.split("#", 1)[0].strip(), flags=re.IGNORECASE):
            return Version(match[1])
    raise LookupError(f"{name} is not pinned in {path}")


def test_the_classifiers_name_every_django_line_and_python_the_matrix_runs():
    classifiers = PROJECT["classifiers"]
    djangos = {c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Framework :: Django :: \d+\.\d+", c)}
    pythons = {
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert djangos == set(MATRIX)
    assert pythons == {python for versions in MATRIX.values() for python in versions}
    assert Version(PROJECT["requires-python"].removeprefix(">=")) == min(Version(p) for p in pythons)


def test_the_django_requirement_takes_each_line_the_matrix_pins_and_nothing_newer():
    (django,) = [Requirement(r) for r in PROJECT["dependencies"] if Requirement(r).name.lower() == "django"]
    for line in MATRIX:
        own = PROJECT_ROOT / "requirements" / f"django{line.replace('.', '')}.txt"
        pinned = _pin(own if own.exists() else PROJECT_ROOT / "requirements.txt", "Django")
        assert f"{pinned.major}.{pinned.minor}" == line, (own, pinned)
        assert django.specifier.contains(pinned), (django, pinned)
    newest = max(Version(line) for line in MATRIX)
    assert not django.specifier.contains(Version(f"{newest.major}.{newest.minor + 1}")), django


def test_make_test_runs_the_whole_suite_on_the_oldest_combination():
    # requirements.txt (the project's .venv, `make test`) is the combination the matrix leaves to `make test`.
    line, python = _noxfile_constant("WHOLE_SUITE")
    assert python in MATRIX[line] and python == PROJECT["requires-python"].removeprefix(">=")
    pinned = _pin(PROJECT_ROOT / "requirements.txt", "Django")
    assert f"{pinned.major}.{pinned.minor}" == line
