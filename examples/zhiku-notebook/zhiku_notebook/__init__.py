"""zhiku-notebook: Jupyter notebooks for zhiku, as a plugin (the standard library and zhiku's public loader API only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zhiku import KnowledgeBase
from zhiku.errors import LoaderError
from zhiku.types import SourceDoc

__all__ = ["NotebookLoader", "list_notebooks"]


class NotebookLoader:
    """A notebook's Markdown cells as they are and its code cells as fenced code, titled by its first heading."""

    doc_type = "notebook"
    suffixes = (".ipynb",)

    def __init__(self, settings: Any = None) -> None:
        self.settings = settings

    def load(self, path: Path, source: str) -> SourceDoc:
        try:
            nb = json.loads(Path(path).read_text(encoding="utf-8"))
            cells = [(c["cell_type"], "".join(c.get("source", ""))) for c in nb["cells"]]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            raise LoaderError(f"not a readable Jupyter notebook: {path} ({type(e).__name__}: {e})") from None
        language = nb.get("metadata", {}).get("language_info", {}).get("name", "")
        blocks = [text if kind == "markdown" else f"```{language}\n{text}\n```" for kind, text in cells if text.strip()]
        if not blocks:
            raise LoaderError(f"no text in the notebook's cells: {path}")
        text = "\n\n".join(blocks)
        title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), Path(path).stem)
        return SourceDoc(source=source, doc_type=self.doc_type, title=title, text=text)


def list_notebooks(kb: KnowledgeBase) -> list[str]:
    """List the Jupyter notebooks in the knowledge base, as "title (source)".

    When to use: the user asks which notebooks are available, before searching them with query_knowledge_hub.

    Example: {}
    """
    return [f"{d.title} ({d.source})" for d in kb.documents() if d.doc_type == "notebook"]
