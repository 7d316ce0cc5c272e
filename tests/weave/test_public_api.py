"""The core's public modules: what the import contract allows the apps is what the reference page lists,
and every name a public module exports is there and documented."""

import importlib
import re
import tomllib

import pytest

from tools.processes import PROJECT_ROOT

PAGE = (PROJECT_ROOT / "docs" / "reference" / "public-api.md").read_text()
# Modules a site mounts or names in settings rather than imports from: no `__all__` to check.
NOT_IMPORTED = {"weave.urls"}


def documented_modules() -> set[str]:
    return set(re.findall(r"^\| `(weave(?:\.\w+)*)` \|", PAGE, flags=re.MULTILINE))


def allowed_to_the_apps() -> set[str]:
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["name"] == "The apps import only the core's public modules"]
    assert contract["source_modules"] == ["notifications", "onboarding"]
    assert contract["forbidden_modules"] == ["weave"]
    allowed = {line.split(" -> ")[1] for line in contract["ignore_imports"]}
    for app in contract["source_modules"]:  # both apps get the same list
        assert {line.split(" -> ")[1] for line in contract["ignore_imports"] if line.startswith(f"{app}.")} == allowed
    return allowed


def test_the_apps_may_import_only_documented_modules():
    assert allowed_to_the_apps() <= documented_modules()


@pytest.mark.parametrize("module", sorted(documented_modules() - NOT_IMPORTED))
def test_a_public_module_exports_what_the_reference_lists(module):
    imported = importlib.import_module(module)
    exported = imported.__all__
    assert exported and len(exported) == len(set(exported))
    missing = [name for name in exported if not hasattr(imported, name)]
    assert missing == []
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| `{module}` |"))
    undocumented = [name for name in exported if f"`{name}`" not in row]
    assert undocumented == []
