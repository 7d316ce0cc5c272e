"""Counts in words: Weave says "1 attempt" and "2 attempts", never "attempt(s)"."""

import ast
import re
from pathlib import Path

from weave.wording import how_many, plural

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("weave", "notifications", "onboarding")
HEDGED = re.compile(r"[a-z]\(s\)")  # "attempt(s)", "job(s)"
# A URL scheme and a function name are not counts.
NOT_COUNTS = ("http(s)://", "send_to_user(s)")


def test_one_thing_is_singular_and_any_other_number_plural():
    assert [how_many(n, "attempt{}") for n in (0, 1, 2)] == ["0 attempts", "1 attempt", "2 attempts"]
    assert plural(1, "step receipt{}") == "step receipt" and plural(3, "step receipt{}") == "step receipts"


def _strings(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module (f-strings' literal parts included), not its comments or docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_shipped_sentence_hedges_a_count():
    hedged = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for package in SHIPPED
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
        for line, text in _strings(path)
        if HEDGED.search(text) and not any(ok in text for ok in NOT_COUNTS)
    ]
    assert not hedged, "\n".join(hedged)
