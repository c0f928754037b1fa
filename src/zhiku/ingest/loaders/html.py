"""HTML pages: the main content, less boilerplate, as Markdown with the standard library only."""

from __future__ import annotations

import codecs
import re
from contextlib import suppress
from html.parser import HTMLParser
from pathlib import Path

from zhiku.errors import LoaderError
from zhiku.ingest.loaders.encoding import (
    SNIFF_BYTES,
    decode_text,
    normalize_newlines,
    read_head,
    sniff_bytes,
    wrong_suffix,
)
from zhiku.ingest.loaders.markup import Configured, drop_cjk_spaces, first_heading, markdown_table, not_heading
from zhiku.types import SourceDoc

_SKIP_TAGS = frozenset(
    "script style noscript template svg nav aside footer form button select iframe object head canvas dialog".split()
)
_BLOCK_TAGS = frozenset(
    "p div section article main blockquote figure figcaption dl dt dd address header ul ol center details summary hr".split()
)
_SKIP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar"})
_LANGUAGE_RE = re.compile(r"\b(?:language|lang)-([A-Za-z0-9_+#.-]+)")  # <code class="language-python">

_BOILERPLATE_RE = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|menu|breadcrumbs?|sidebar|footer|comments?|advert\w*|"
    r"ads|share|social|cookie\w*|related|pagination|skip-link)(?:$|[\s_-])",
    re.IGNORECASE,
)
_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
_META_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)


def decode_html(data: bytes, path: Path) -> str:
    if not data:
        raise LoaderError(f"empty file (0 bytes): {path}")
    if not data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        if m := _META_CHARSET_RE.search(data[:4096]):
            name = m.group(1).decode("ascii", "replace").lower()
            name = {"gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030"}.get(name, name)
            with suppress(LookupError, UnicodeDecodeError):
                return normalize_newlines(data.decode(name))
    text, _ = decode_text(data, path)
    return normalize_newlines(text)


def drop_unclosed_comment(html: str) -> str:
    """Browsers hide everything after a ``<!--`` never closed; the parser would hand it over as text."""
    pos = 0
    while (start := html.find("<!--", pos)) != -1:
        end = html.find("-->", start + 4)
        if end == -1:
            return html[:start]
        pos = end + 3
    return html


class _Extractor(HTMLParser):
    def __init__(self, content_tag: str | None) -> None:
        super().__init__(convert_charrefs=True)
        self.content_tag = content_tag  # "main", "article" or None (the whole body)
        self.depth_in_content = 0 if content_tag else 1
        self.stack: list[tuple[str, bool]] = []  # (tag, skipped)
        self.skip = 0
        self.blocks: list[str] = []
        self.buf: list[str] = []
        self.heading: int | None = None
        self.pre = 0
        self.pre_language = ""
        self.code_at: list[int] = []  # where each open inline <code>'s text begins in buf
        self.lists: list[int | None] = []  # per open list: its items so far, None for bullets
        self.list_start = 0  # where the blocks of the outermost open list begin
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None
        self.title = ""
        self._in_title = False

    def _flush(self) -> None:
        raw = "".join(self.buf)
        self.buf = []
        self.code_at = [0] * len(self.code_at)
        if self.pre or not (text := drop_cjk_spaces(" ".join(raw.split()))):
            return
        if self.cell is not None:
            self.cell.append(text)
            return
        if self.heading is not None:
            self.blocks.append("#" * self.heading + " " + text)
        elif self.lists:
            if (counter := self.lists[-1]) is not None:
                self.lists[-1] = counter = counter + 1
            marker = "-" if counter is None else f"{counter}."
            self.blocks.append("  " * (len(self.lists) - 1) + f"{marker} {text}")
        else:
            self.blocks.append(not_heading(text))

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self.depth_in_content and not self.skip:
            self.buf.append(data)

    def _boilerplate(self, tag: str, attrs: dict[str, str | None]) -> bool:
        if tag in _SKIP_TAGS or "hidden" in attrs or attrs.get("aria-hidden") == "true":
            return True
        if (attrs.get("role") or "").lower() in _SKIP_ROLES or (tag == "header" and self.content_tag is None):
            return True  # a page header outside the content
        names = f"{attrs.get('class') or ''} {attrs.get('id') or ''}"
        return bool(names.strip()) and bool(_BOILERPLATE_RE.search(names))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        a = dict(attrs)
        if tag in _VOID:
            if tag == "br" and self.depth_in_content and not self.skip:
                self.buf.append("\n" if self.pre else " ")
            return
        skipped = bool(self.skip) or self._boilerplate(tag, a)
        self.stack.append((tag, skipped))
        if skipped:
            self.skip += 1
            return
        if tag == self.content_tag:
            self.depth_in_content += 1
        if not self.depth_in_content:
            return
        if tag == "code" and not self.pre:  # inline code keeps its backticks (``Bearer <token>`` would read as a tag)
            self.code_at.append(len(self.buf))
        elif tag == "code" and (m := _LANGUAGE_RE.search(a.get("class") or "")):  # ``pre > code``: the language
            self.pre_language = m.group(1)
        self._open(tag)

    def _open(self, tag: str) -> None:
        if tag == "tr" or (tag in ("td", "th") and not self.tables):
            if self.tables:
                self.tables[-1].append([])
            return
        heading = re.fullmatch(r"h[1-6]", tag)
        if not (heading or tag in _BLOCK_TAGS or tag in ("pre", "li", "table", "td", "th")):
            return
        self._flush()
        if heading:
            self.heading = int(tag[1])
        elif tag == "pre":
            self.pre += 1
        elif tag in ("ul", "ol"):
            if not self.lists:
                self.list_start = len(self.blocks)
            self.lists.append(0 if tag == "ol" else None)
        elif tag == "table":
            self.tables.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _VOID:
            return
        while self.stack:  # close up to the matching tag (tolerates unclosed <p>, <li>, <td>)
            open_tag, skipped = self.stack.pop()
            if skipped:
                self.skip -= 1
            elif self.depth_in_content:
                self._close(open_tag)
                if open_tag == self.content_tag:
                    self.depth_in_content -= 1
            if open_tag == tag:
                break

    def _close(self, tag: str) -> None:
        if re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self.heading = None
        elif tag == "pre" and self.pre:
            code = "".join(self.buf).strip("\n")
            self.buf = []
            self.pre -= 1
            if code.strip():
                self.blocks.append(f"```{self.pre_language}\n" + code.replace("```", "ˋˋˋ") + "\n```")
            self.pre_language = ""
        elif tag == "code" and not self.pre:
            at = self.code_at.pop() if self.code_at else len(self.buf)
            if body := "".join(self.buf[at:]).strip():
                self.buf[at:] = [_code_span(body)]
        elif tag in ("ul", "ol") and self.lists:
            self._flush()
            self.lists.pop()
            if not self.lists and len(self.blocks) > self.list_start:  # the items of a list: one Markdown paragraph
                self.blocks[self.list_start :] = ["\n".join(self.blocks[self.list_start :])]
        elif tag in ("td", "th") and self.cell is not None:
            self._flush()
            if self.tables and self.tables[-1]:
                self.tables[-1][-1].append(" ".join(self.cell))
            self.cell = None
        elif tag == "table" and self.tables:
            self._flush()
            rows = self.tables.pop()
            if self.cell is not None:  # a table inside a cell: its text joins the cell
                self.cell.extend(" ".join(r) for r in rows)
            elif md := markdown_table(rows):
                self.blocks.append(md)
        elif tag in _BLOCK_TAGS or tag == "li":
            self._flush()

    def close(self) -> None:
        super().close()
        self._flush()


def _code_span(code: str) -> str:
    """Fenced by one backtick more than its longest run, padded when it starts or ends with one."""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", code)), default=0) + 1)
    pad = " " if code.startswith("`") or code.endswith("`") else ""
    return f"{fence}{pad}{code}{pad}{fence}"


def html_markdown(html: str) -> tuple[str, str]:
    """``(title, Markdown)`` of an HTML page's main content (an EPUB's chapters too)."""
    lower = html.lower()
    content = "main" if "<main" in lower else "article" if "<article" in lower else None
    parser = _Extractor(content)
    parser.feed(drop_unclosed_comment(html))
    parser.close()
    return " ".join(parser.title.split()), "\n\n".join(parser.blocks)


class HtmlLoader(Configured):
    doc_type: str = "html"
    suffixes: tuple[str, ...] = (".html", ".htm", ".xhtml")

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        data = read_head(path, None)
        if sniff_bytes(data[:SNIFF_BYTES]) not in (None, "html"):
            raise wrong_suffix(data, "HTML", path)
        title, text = html_markdown(decode_html(data, path))
        if not text.strip():
            raise LoaderError(f"no text in the HTML page's content: {path}")
        title = title or first_heading(text, path.stem)
        return SourceDoc(source=source, doc_type=self.doc_type, title=title, text=text, pages=(), encoding="html")
