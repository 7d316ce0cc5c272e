"""MkDocs hooks (mkdocs.yml `hooks:`): refuse reference pages that no longer match the code, add the changelog.

The reference pages generated from the code (`tools.docs_reference`) are files in docs/reference/, so they
read in the repository too; the build stops when one is out of date, naming the command that rewrites it.
The changelog page is CHANGELOG.md itself, so there is one changelog, not two.
"""

import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

# MkDocs loads this file by path: make the project importable (`mkdocs` may run from .venv/bin).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.docs_reference import ROOT, stale  # noqa: E402


def on_files(files: Files, config: MkDocsConfig) -> Files:
    out_of_date = stale()
    if out_of_date:
        pages = ", ".join(f"docs/{path}" for path in out_of_date)
        raise ValueError(f"{pages} out of date with the code: run python -m tools.docs_reference --write")
    if files.get_file_from_path("changelog.md") is not None:
        raise ValueError("docs/changelog.md is CHANGELOG.md, added on every build; delete the file")
    files.append(File.generated(config, "changelog.md", content=Path(ROOT, "CHANGELOG.md").read_text()))
    return files
