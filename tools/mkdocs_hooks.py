"""MkDocs hooks (mkdocs.yml `hooks:`): add the pages generated from the code, and the changelog.

The reference pages are rendered on every build by `tools.docs_reference`, so a setting, a check id or
a command added to the code shows up in the site without anyone regenerating a file. The changelog
page is CHANGELOG.md itself, so there is one changelog, not two.
"""

import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

# MkDocs loads this file by path: make the project importable (`mkdocs` may run from .venv/bin).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.docs_reference import ROOT, pages  # noqa: E402


def on_files(files: Files, config: MkDocsConfig) -> Files:
    generated = pages()
    generated["changelog.md"] = Path(ROOT, "CHANGELOG.md").read_text()
    for path, content in generated.items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} is generated on every build (tools/docs_reference.py); delete the file")
        files.append(File.generated(config, path, content=content))
    return files
