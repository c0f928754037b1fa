"""Legacy Word ``.doc`` (and WPS Writer's ``.wps``, the same binary format) through a converter on the machine
(LibreOffice, antiword or catdoc), and ``.rtf`` with striprtf (``zhiku[rtf]``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from itertools import groupby
from pathlib import Path

from zhiku.errors import LoaderError, MissingDependency
from zhiku.ingest.files import MIB, collapse_whitespace, read_bounded
from zhiku.ingest.loaders.docx import DocxLoader
from zhiku.ingest.loaders.encoding import wrong_suffix
from zhiku.ingest.loaders.markup import Configured, first_heading, markdown_table
from zhiku.types import SourceDoc

OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
CONVERT_TIMEOUT_S = 120
DOC_INSTALL = "install LibreOffice, antiword or catdoc (apt-get install antiword), or save the file as .docx"
RTF_INSTALL = "pip install 'zhiku[rtf]'"
_TABLE_ROW_RE = re.compile(r"^\|.*\|$")  # antiword's table rows


def _run(cmd: list[str], path: Path) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=CONVERT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise LoaderError(f"{cmd[0]} did not finish in {CONVERT_TIMEOUT_S} s: {path}") from None
    if done.returncode:
        why = " ".join(done.stderr.decode("utf-8", "replace").split())[:200] or f"exit status {done.returncode}"
        raise LoaderError(f"{cmd[0]} cannot read it ({why}): {path}")
    return done.stdout.decode("utf-8", "replace")


def _tables(text: str) -> str:
    out: list[str] = []
    for rows, lines in groupby(text.split("\n"), key=lambda line: bool(_TABLE_ROW_RE.match(line.strip()))):
        if rows:
            out.append(markdown_table([[c.strip() for c in line.strip()[1:-1].split("|")] for line in lines]))
        else:
            out += lines
    return "\n".join(out)


class LegacyWordLoader(Configured):
    doc_type: str = "doc"
    suffixes: tuple[str, ...] = (".doc", ".wps", ".rtf")

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        data = read_bounded(path, int(self.settings.max_file_mb * MIB))
        if data.lstrip().startswith(b"{\\rtf"):  # Word also saves RTF under a .doc name
            text, kind = self._rtf(data, path), "rtf"
        elif data.startswith(OLE) and (office := shutil.which("soffice") or shutil.which("libreoffice")):
            return self._office(office, path, source)
        elif data.startswith(OLE):
            text, kind = self._doc(path), "doc"
        else:
            raise wrong_suffix(data[:1024], "a Word .doc or .rtf document", path)
        if not (text := collapse_whitespace(text).strip()):
            raise LoaderError(f"no text in the document: {path}")
        return SourceDoc(source, self.doc_type, first_heading(text, path.stem), text, encoding=kind)

    def _rtf(self, data: bytes, path: Path) -> str:
        try:
            from striprtf.striprtf import rtf_to_text
        except ImportError:
            raise MissingDependency(f"reading .rtf files needs striprtf: {RTF_INSTALL}") from None
        try:
            return str(rtf_to_text(data.decode("latin-1"), errors="replace"))  # type: ignore[no-untyped-call]
        except (ValueError, LookupError, IndexError) as e:
            raise LoaderError(f"not a readable RTF document ({e}): {path}") from None

    def _office(self, office: str, path: Path, source: str) -> SourceDoc:
        with tempfile.TemporaryDirectory(prefix="zhiku-doc-") as tmp:
            profile = f"-env:UserInstallation=file://{tmp}/profile"  # its own: a running LibreOffice would block it
            _run([office, profile, "--headless", "--convert-to", "docx", "--outdir", tmp, str(path)], path)
            doc = DocxLoader(self.settings).load(Path(tmp) / f"{path.stem}.docx", source)
        return SourceDoc(source, self.doc_type, doc.title, doc.text, (), "doc", doc.images)

    def _doc(self, path: Path) -> str:
        if shutil.which("antiword"):
            return _tables(_run(["antiword", "-w", "0", "-m", "UTF-8.txt", str(path)], path))
        if shutil.which("catdoc"):
            return _run(["catdoc", "-w", "-d", "utf-8", str(path)], path)
        raise MissingDependency(f"reading .doc files needs a converter: {DOC_INSTALL}")
