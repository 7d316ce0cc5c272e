"""The documentation is whole in the repository: links resolve, generated pages match the code, extras listed."""

import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement

from tools import check_links
from tools.processes import PROJECT_ROOT


def test_every_relative_link_and_anchor_in_readme_and_docs_resolves_in_the_repository():
    assert check_links.broken() == []
    assert sum(1 for path in check_links.documents() for _ in check_links.links(path)) > 100


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("docs/no-such-page.md", "does not exist"),
        ("docs/fakes.md#no-such-heading", "has no heading #no-such-heading"),
        ("#no-such-heading", "has no heading"),
    ],
)
def test_the_link_check_names_a_broken_link(target, why):
    assert why in check_links.problem(PROJECT_ROOT / "README.md", target)


def test_the_link_check_knows_the_sites_heading_ids():
    assert check_links.slug("The documented `Q_CLUSTER`") == "the-documented-q_cluster"
    assert check_links.slug("The demo's ports") == "the-demos-ports"
    guide = PROJECT_ROOT / "docs" / "getting-started.md"
    assert check_links.problem(guide, "operations.md#the-documented-q_cluster") is None


def test_the_generated_reference_pages_in_the_repository_match_the_code():
    # In a process of its own, as `make lint` runs it: this one has the test settings' extra apps loaded.
    done = subprocess.run(
        [sys.executable, "-m", "tools.docs_reference", "--check"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("settings", "checks", "commands", "services"):
        assert (PROJECT_ROOT / "docs" / "reference" / f"{page}.md").exists()


def extras() -> dict[str, list[str]]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    return {extra: [Requirement(r).name for r in reqs] for extra, reqs in project["optional-dependencies"].items()}


def extras_table(path) -> dict[str, str]:
    """extra -> its "installs" cell, from the first table whose header starts with `| extra | installs |`."""
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", path.read_text(), flags=re.M)
    names = [name for name, _ in rows if name in extras()]
    assert len(names) == len(set(names)), f"{path.name} lists an extra twice: {names}"
    return {name: cell for name, cell in rows if name in extras()}


@pytest.mark.parametrize("path", ["README.md", "docs/reference/package.md"])
def test_every_extra_is_listed_once_with_what_it_installs(path):
    table = extras_table(PROJECT_ROOT / path)
    assert set(table) == set(extras())
    for extra, names in extras().items():
        for name in names:
            if name == "weave-jobs":  # testing and all name other extras
                continue
            assert name.lower() in table[extra].lower(), f"{path}: `{extra}` installs {name}"


def test_make_test_sets_up_what_the_tests_need_and_ci_calls_it_without_repeating_it():
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    target = makefile[makefile.index("\ntest: ") : makefile.index("\n\n", makefile.index("\ntest: "))]
    assert "test-deps" in target and "CI=$${CI:-true}" in target
    deps = (PROJECT_ROOT / "scripts" / "test-deps.sh").read_text()
    for tool in ("chromium", "pgbouncer", "faketime", "gcc", "redis-server", "postgresql", "npm ci"):
        assert tool in deps, f"scripts/test-deps.sh does not install {tool}"
    ci = (PROJECT_ROOT / ".ci" / "run").read_text()
    assert "apt-get" not in ci and "npm" not in ci and "initdb" not in ci
    # Lint, the tests (with their set-up), the mutations of the change, the other Django and Python
    # combinations: no step of its own set-up.
    assert re.findall(r"^make (\w+)", ci, flags=re.M) == ["lint", "test", "mutate", "matrix"]
