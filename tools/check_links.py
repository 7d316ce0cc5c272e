"""Check every relative link in README.md and docs/: the file exists in the repository, and an anchor
(`page.md#section`, `#section`) names a heading of that page.

Run by `make lint`: `python -m tools.check_links`. Anchors are the ids the documentation site gives
headings (Python-Markdown's `toc` extension: lower case, punctuation dropped, spaces as hyphens, a
repeated heading suffixed `_1`, `_2`...). Links to other sites (`https://...`, `mailto:`) are not
fetched: the check needs no network.
"""

import re
import sys
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """The id the documentation site gives a heading with this Markdown text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags show nothing
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading id of a Markdown file, duplicates numbered as the site numbers them."""
    seen: dict[str, int] = {}
    ids = set()
    for _, line in prose_lines(path.read_text()):
        found = HEADING.match(line)
        if not found:
            continue
        base = slug(found.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}_{count}")
    ids |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", path.read_text()))
    return frozenset(ids)


def links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in prose_lines(path.read_text()):
        line = CODE_SPAN.sub("", line)
        for target in INLINE_LINK.findall(line):
            yield number, target
        if found := REFERENCE_LINK.match(line):
            yield number, found.group(1)


def problem(source: Path, target: str) -> str | None:
    """Why `target`, linked from `source`, does not resolve in the repository; None when it does."""
    if EXTERNAL.match(target) or target.startswith("//"):
        return None
    where, _, anchor = target.partition("#")
    page = (source.parent / where).resolve() if where else source
    if not page.exists():
        return f"{where} does not exist"
    if ROOT not in page.parents and page != ROOT:
        return f"{where} is outside the repository"
    if anchor and page.suffix == ".md" and anchor not in anchors(page):
        return f"{page.relative_to(ROOT)} has no heading #{anchor}"
    return None


def broken() -> list[str]:
    found = []
    for path in documents():
        for number, target in links(path):
            why = problem(path, target)
            if why:
                found.append(f"{path.relative_to(ROOT)}:{number}: ({target}) {why}")
    return found


def main() -> int:
    found = broken()
    for line in found:
        print(line)
    checked = sum(1 for path in documents() for _ in links(path))
    print(f"{checked} links in {len(documents())} files: {len(found)} broken", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
