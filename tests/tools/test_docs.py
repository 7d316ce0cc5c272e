"""The front door and the documentation site: short, truthful, built strictly, generated pages complete."""

import re
import subprocess
import sys

import pytest

from tools import docs_reference
from tools.processes import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
CHECK_ID = re.compile(r"""id=["']((?:weave|notifications|onboarding)\.[EWCI]\d{3})["']""")
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? \d+|\(#\d+\)")


def ci_make_targets() -> list[str]:
    return re.findall(r"^make (\w+)", (PROJECT_ROOT / ".ci" / "run").read_text(), flags=re.M)


def test_readme_is_a_front_door_of_at_most_200_lines_with_the_ci_test_command():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "test" in ci_make_targets(), ".ci/run must still call `make test`"
    assert "```sh\nmake test\n```" in text
    assert "make run" in text


def test_readme_links_point_at_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if target.startswith("http"):
            continue
        assert (PROJECT_ROOT / target).exists(), f"README links to {target}, which does not exist"


@pytest.mark.parametrize("path", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_user_facing_text_carries_no_issue_numbers(path):
    found = ISSUE_NUMBER.findall(path.read_text())
    assert not found, f"{path.name} mentions {found}"


def test_generated_pages_carry_no_issue_numbers():
    for path, page in docs_reference.pages().items():
        found = ISSUE_NUMBER.findall(page)
        assert not found, f"{path} (from the code's docstrings) mentions {found}"


def test_generated_settings_page_lists_every_key_with_its_default():
    from weave.conf import KEYS

    page = docs_reference.settings_page()
    for name, key in KEYS.items():
        row = next((line for line in page.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"{name} is missing from the settings page"
        if key.fallback is None and not isinstance(key.default, tuple):
            assert f"`{key.default!r}`" in row


def test_generated_checks_page_lists_every_check_id_in_the_shipped_code():
    in_code = set()
    for package in ("weave", "notifications", "onboarding"):
        for path in (PROJECT_ROOT / package).rglob("*.py"):
            in_code |= set(CHECK_ID.findall(path.read_text()))
    page = docs_reference.checks_page()
    assert in_code, "no check ids found: the pattern no longer matches the code"
    assert {i for i in in_code if f"## `{i}`" not in page} == set()
    assert "## `weave.E001`" in page and "Q_CLUSTER is missing" in page


def test_generated_commands_page_lists_every_shipped_and_demo_command():
    page = docs_reference.commands_page()
    for folder in ("weave", "demo"):
        for path in (PROJECT_ROOT / folder / "management" / "commands").glob("[!_]*.py"):
            assert f"### `{path.stem}`" in page
    assert "`--hours`" in page  # weave_tune's own argument, not Django's common ones
    assert "--verbosity" not in page


def test_generated_services_page_shows_every_public_service_and_no_memory_address():
    import notifications.services
    import onboarding.services

    page = docs_reference.services_page()
    for module in (notifications.services, onboarding.services):
        names = docs_reference.public_names(module)
        assert names
        for name in names:
            assert f"### `{name}`" in page
    assert "notification_create(*, title" in page
    assert "onboarding_start(*, supplier" in page
    assert " at 0x" not in page  # a default's repr would change on every build


def test_the_site_builds_strictly_with_every_page_in_the_nav(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", tmp_path / "site"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for page in ("reference/settings/index.html", "reference/checks/index.html", "changelog/index.html"):
        assert (tmp_path / "site" / page).exists()
    assert "PUSH_BATCH_SIZE" in (tmp_path / "site" / "reference" / "settings" / "index.html").read_text()
    # Reading the site needs no network either: no script or stylesheet from elsewhere.
    for html in (tmp_path / "site").rglob("*.html"):
        assert not re.search(r'<script[^>]+src="https?:|<link[^>]+href="https?:', html.read_text()), html
