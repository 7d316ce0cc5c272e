"""The reference pages of the documentation, written from the code so they cannot go stale.

The pages (`docs/reference/settings.md`, `checks.md`, `commands.md`, `services.md`) are files in the
repository, so they read on GitHub and in a checkout as in the site: the `WEAVE` settings with their
defaults and ranges (`weave.conf.KEYS`), every system check id with its message and hint (read from the
source of the shipped packages), the management commands with their arguments, and the apps' public
services with their signatures. `tools/mkdocs_hooks.py` refuses to build the site while a committed
page differs from what the code gives, and so does `make lint` (`--check`).

    python -m tools.docs_reference --write      # rewrite the pages after changing the code
    python -m tools.docs_reference --check      # exit 1 naming each page that is out of date
    python -m tools.docs_reference settings     # print one page
"""

import ast
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("weave", "notifications", "onboarding")
GENERATED = (
    "This page is generated from the code by `python -m tools.docs_reference --write`; `make lint` fails while it "
    "is out of date."
)


def setup_django() -> None:
    """Load the demo site's settings (development mode: no secrets needed) once."""
    import django
    from django.apps import apps

    if apps.ready:
        return
    # The demo site's settings, whatever the caller's environment says: the pages describe the shipped apps
    # as a site installs them, not the extra apps and job types of a test run's settings.
    os.environ["DJANGO_SETTINGS_MODULE"] = "demo.settings"
    # The demo settings refuse to load without production secrets unless DEBUG is on; a docs build
    # only reads code, so it always runs in development mode.
    os.environ["DEBUG"] = "true"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    django.setup()


def _md(text: object) -> str:
    """Plain text safe in Markdown: `<expr>` placeholders are not HTML tags, a lone `*` is not emphasis."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def _cell(text: object) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


# --- settings ----------------------------------------------------------------------------------

_GROUPS = (
    ("LEASE_TTL", "Leases"),
    ("HEARTBEAT_", "Leases"),
    ("WORKER_DB_", "Worker database sessions"),
    ("PUSH_", "Push notifications"),
    ("METRICS_", "Operator console"),
    ("DASHBOARD_", "Operator console"),
    ("WAKE_", "Waking workers for due work"),
    ("SUPPLIER_", "Supplier onboarding"),
    ("ONBOARDING_", "Supplier onboarding"),
)


def _group(name: str) -> str:
    return next((title for prefix, title in _GROUPS if name.startswith(prefix)), "Other")


def _default(key: Any) -> str:
    if key.fallback is not None:
        return f"`{key.fallback.name}` ({key.fallback.default!r})"
    if isinstance(key.default, tuple) and len(key.default) > 2:
        return "the built-in list (below)"
    return f"`{key.default!r}`"


def settings_page() -> str:
    setup_django()
    from weave.conf import KEYS

    groups: dict[str, list[str]] = {}
    for name, key in KEYS.items():
        row = f"| `{name}` | {_cell(_default(key))} | {_cell(key.expected())} | {_cell(key.doc)} |"
        groups.setdefault(_group(name), []).append(row)
    out = [
        "# Settings",
        "",
        GENERATED,
        "",
        "Every key lives in one dict, `WEAVE`, in your site's settings. Unset keys take the default. "
        "`manage.py check` refuses an unknown key (`weave.E005`) and a value of the wrong type or range "
        "(`weave.E006`), naming the key and what it must be.",
        "",
        "```python",
        'WEAVE = {"PUSH_URL": "https://push.example.com/send", "PUSH_TOKEN": os.environ.get("PUSH_TOKEN", "")}',
        "```",
    ]
    for title, rows in groups.items():
        out += [
            "",
            f"## {title}",
            "",
            "| key | default | must be | what it is for |",
            "| --- | --- | --- | --- |",
            *rows,
        ]
    lists = [(name, key) for name, key in KEYS.items() if isinstance(key.default, tuple) and len(key.default) > 2]
    for name, key in lists:
        shown = [f"{name} = (", *[f'    "{path}",' for path in key.default], ")"]
        out += ["", f"The default of `{name}`:", "", "```python", *shown, "```"]
    return "\n".join(out) + "\n"


# --- system checks -----------------------------------------------------------------------------

_LEVELS = {
    "Error": "error",
    "Warning": "warning",
    "CheckWarning": "warning",
    "Critical": "critical",
    "Info": "info",
    "Debug": "debug",
}


def _text(node: ast.expr | None) -> str:
    """A message or hint as a reader sees it: an f-string's fields shown as <expression>."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append(f"<{ast.unparse(value.value)}>")
        return "".join(parts)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return f"<{ast.unparse(node)}>"
    return f"<{ast.unparse(node)}>"


def _checks_in(path: Path, module: str) -> Iterator[dict[str, str]]:
    tree = ast.parse(path.read_text(), str(path))
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        doc = (ast.get_docstring(function) or "").split("\n\n")[0].replace("\n", " ")
        for call in ast.walk(function):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _LEVELS):
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            check_id = keywords.get("id")
            if not isinstance(check_id, ast.Constant):
                continue
            yield {
                "id": str(check_id.value),
                "level": _LEVELS[call.func.id],
                "function": f"{module}.{function.name}",
                "doc": doc,
                "message": _text(call.args[0] if call.args else keywords.get("msg")),
                "hint": _text(keywords.get("hint")),
            }


def system_checks() -> list[dict[str, Any]]:
    """Every check id in the shipped packages, with each distinct message it can carry."""
    found: dict[str, dict[str, Any]] = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts or "testing" in path.parts:
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for check in _checks_in(path, module):
                entry = found.setdefault(
                    check["id"], {"id": check["id"], "level": check["level"], "functions": [], "cases": []}
                )
                if check["function"] not in entry["functions"]:
                    entry["functions"].append(check["function"])
                    entry.setdefault("docs", []).append(check["doc"])
                entry["cases"].append((check["message"], check["hint"]))
    return sorted(found.values(), key=lambda c: (c["id"].split(".")[0] != "weave", c["id"]))


def _opaque(text: str) -> bool:
    return text.startswith("<") and text.endswith(">") and text.count("<") == 1


def checks_page() -> str:
    out = [
        "# System checks",
        "",
        GENERATED,
        "",
        "`manage.py check` (and every management command) runs these. Errors stop the command; warnings are "
        "printed. Checks tagged `database` (`weave.W030`) run only with `manage.py check --database default` "
        "and during `migrate`. Text in angle brackets is filled in from your configuration.",
    ]
    for check in system_checks():
        out += ["", f"## `{check['id']}`", "", f"*{check['level']}*, raised by "]
        out[-1] += ", ".join(f"`{f}`" for f in check["functions"]) + ": " + _md(" ".join(check["docs"]))
        for message, hint in check["cases"]:
            # A message built elsewhere (a variable) says nothing here: the docstring above describes it.
            if message and not _opaque(message):
                out += ["", f"- **Message:** {_md(message)}"]
                if hint and not _opaque(hint):
                    out.append(f"  **Hint:** {_md(hint)}")
    return "\n".join(out) + "\n"


# --- management commands -----------------------------------------------------------------------


def _command_arguments(app: str, name: str) -> tuple[str, list[str]]:
    from django.core.management import load_command_class
    from django.core.management.base import BaseCommand

    command = load_command_class(app, name)
    parser = command.create_parser("manage.py", name)
    common = {a.dest for a in BaseCommand().create_parser("manage.py", name)._actions}
    rows = []
    for action in parser._actions:
        if action.dest in common:
            continue
        flag = ", ".join(action.option_strings) or action.dest
        quiet = action.default in (None, "", [], False) or not action.option_strings or "default" in (action.help or "")
        default = "" if quiet else f" (default {action.default!r})"
        choices = f" One of: {', '.join(map(str, action.choices))}." if action.choices else ""
        rows.append(f"| `{flag}` | {_cell((action.help or '') + default + choices)} |")
    return str(command.help), rows


def commands_page() -> str:
    setup_django()
    from django.core.management import get_commands

    commands = get_commands()
    shipped = sorted(name for name, app in commands.items() if app in SHIPPED)
    demo = sorted(name for name, app in commands.items() if app == "demo")
    out = [
        "# Management commands",
        "",
        GENERATED,
        "",
        "Besides these, a site runs django-q2's `manage.py qcluster` (the workers) and Django's `manage.py "
        "migrate`, which also creates Weave's sweep schedules.",
    ]
    for title, names, app_of in (
        ("Shipped with the apps", shipped, commands),
        ("This repository's demo site only (not in the wheel)", demo, commands),
    ):
        out += ["", f"## {title}"]
        for name in names:
            help_text, rows = _command_arguments(app_of[name], name)
            out += ["", f"### `{name}`", "", _md(help_text)]
            if rows:
                out += ["", "| argument | meaning |", "| --- | --- |", *rows]
    return "\n".join(out) + "\n"


# --- services ----------------------------------------------------------------------------------


class _Shown:
    """A default shown by name: an object's repr carries its address, which changes on every run."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature(function: Callable[..., Any]) -> str:
    signature = inspect.signature(function)
    plain = (type(None), bool, int, float, str, tuple)
    parameters = [
        p
        if p.default is p.empty or isinstance(p.default, plain)
        else p.replace(default=_Shown(_default_name(p.default)))
        for p in signature.parameters.values()
    ]
    return str(signature.replace(parameters=parameters))


def _default_name(value: object) -> str:
    from weave.leases import default_clock

    return "default_clock" if value is default_clock else type(value).__name__ + "()"


def _summary(obj: object) -> str:
    return (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ")


def public_names(module: Any) -> list[str]:
    """`__all__`, or else the public functions and classes the module defines itself."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and callable(obj) and getattr(obj, "__module__", None) == module.__name__
    ]


def services_page() -> str:
    setup_django()
    import importlib

    out = [
        "# Services",
        "",
        GENERATED,
        "",
        "The public API of each app is its `services` module: keyword-only, typed functions named "
        "`<entity>_<action>`. Each checks its arguments first and raises a `ValidationError` keyed by the field "
        "at fault, storing nothing.",
    ]
    for module_name in ("notifications.services", "onboarding.services"):
        module = importlib.import_module(module_name)
        out += ["", f"## `{module_name}`", "", _summary(module)]
        for name in public_names(module):
            obj = getattr(module, name)
            if not callable(obj):
                out += ["", f"### `{name}` (constant)", "", f"`{name} = {obj!r}`"]
            elif inspect.isfunction(obj):
                out += ["", f"### `{name}`", "", "```python", f"{name}{_signature(obj)}", "```", "", _summary(obj)]
            elif inspect.isclass(obj):
                out += ["", f"### `{name}` (class)", "", _summary(obj)]
    return "\n".join(out) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_page,
    "reference/checks.md": checks_page,
    "reference/commands.md": commands_page,
    "reference/services.md": services_page,
}


def pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    return {path: render() for path, render in PAGES.items()}


def stale() -> list[str]:
    """The generated pages whose file in docs/ is missing or differs from what the code gives."""
    return [path for path, page in pages().items() if _read(ROOT / "docs" / path) != page]


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def main(argv: list[str]) -> int:
    wanted = argv[0] if argv else "--check"
    if wanted == "--write":
        for path, page in pages().items():
            (ROOT / "docs" / path).write_text(page)
        return 0
    if wanted == "--check":
        out_of_date = stale()
        for path in out_of_date:
            print(f"docs/{path} is out of date with the code: run python -m tools.docs_reference --write")
        return 1 if out_of_date else 0
    print(PAGES[f"reference/{wanted}.md"]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
