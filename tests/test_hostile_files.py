"""Files a hostile (or just unlucky) user hands to ingest (issue 12): each fails alone with its reason, nothing
hangs, nothing reads without bound, and the rest of the batch is indexed."""

from __future__ import annotations

import io
import os
import sqlite3
import threading
import zipfile
from pathlib import Path

import pytest

from helpers_kb import CONTRACT_LAW, LEAVE_RULES
from zhiku import stores
from zhiku.errors import IndexLocked, LoaderError, NotFound
from zhiku.ingest.chunking import ChunkShape, chunk_document
from zhiku.ingest.files import collapse_whitespace, discover, printable, read_bounded
from zhiku.ingest.loaders import HtmlLoader, MarkdownLoader, TextLoader, supported_suffixes
from zhiku.ingest.loaders.docx import DocxLoader
from zhiku.ingest.loaders.encoding import decode_text
from zhiku.settings import LoaderSettings

GBK_NAME = "劳动法.md".encode("gbk")


@pytest.fixture
def cli_runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, embed_cache_dir: Path):  # noqa: ANN201
    """``cli_runner(*args) -> Result``: `zhiku` in-process, with the shared embedding cache and a 0.2 s lock wait."""
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.setenv("ZHIKU_STORE__BUSY_TIMEOUT_S", "0.2")
    monkeypatch.chdir(tmp_path)
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _reasons(report) -> dict[str, str]:  # noqa: ANN001
    return {Path(f.path).name: f.reason for f in report.failed}


def test_a_gbk_file_name_is_indexed_under_its_chinese_name(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "g"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), GBK_NAME), "w", encoding="utf-8") as f:
        f.write(LEAVE_RULES)
    (folder / "好文件.md").write_text(CONTRACT_LAW, encoding="utf-8")
    kb = kb_factory(tmp_path / "idx")
    report = kb.ingest([folder])
    assert (sorted(report.added), report.failed) == (["劳动法.md", "好文件.md"], ())
    doc = kb.resolve_document("劳动法.md")
    assert (doc.source, doc.path) == ("劳动法.md", str(folder / "劳动法.md"))
    again = kb.ingest([folder])  # found again by its printable name: unchanged, skipped
    assert (sorted(again.skipped), again.added, again.updated) == (["劳动法.md", "好文件.md"], (), ())


def test_printable_names() -> None:
    raw = os.fsdecode(b"/d/" + GBK_NAME)
    assert printable(raw) == "/d/劳动法.md"
    assert printable(os.fsdecode(b"x\xff\xfe.md")) == "x\\xff\\xfe.md"  # not GB18030 either
    assert printable("普通.md") == "普通.md"


def test_fifo_device_and_socket_are_skipped_without_being_opened(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    os.mkfifo(folder / "pipe.md")
    (folder / "z.txt").symlink_to("/dev/zero")
    (folder / "loop.md").symlink_to(folder / "loop.md")
    (folder / "好.md").write_text(CONTRACT_LAW, encoding="utf-8")
    kb = kb_factory(tmp_path / "idx")
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(kb.ingest([folder])), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # the old code blocks in open(): give it a writer so the test ends, then fail
        with open(folder / "pipe.md", "w"):
            pass
        worker.join(60)
        pytest.fail("ingest opened the FIFO and waited for a writer")
    report = result[0]
    assert report.added == ("好.md",)  # type: ignore[attr-defined]
    reasons = _reasons(report)
    assert (
        reasons["pipe.md"]
        == f"{folder / 'pipe.md'} is a FIFO (named pipe), not a regular file: skipped without opening it"
    )
    assert (
        reasons["z.txt"] == f"{folder / 'z.txt'} is a character device, not a regular file: skipped without opening it"
    )
    assert reasons["loop.md"] == f"cannot read {folder / 'loop.md'}: Too many levels of symbolic links"
    tasks, failures = discover([folder / "pipe.md"], supported_suffixes())  # named directly
    assert (tasks, [f.reason for f in failures]) == (
        [],
        ["a FIFO (named pipe), not a regular file: skipped without opening it"],
    )


def test_file_size_is_checked_before_reading(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "大.txt").write_text("第一条 很长的文本。" * 2000, encoding="utf-8")  # 58 KB
    (folder / "小.md").write_text(LEAVE_RULES, encoding="utf-8")
    kb = kb_factory(tmp_path / "idx", loaders={"max_file_mb": 0.01})
    report = kb.ingest([folder])
    assert report.added == ("小.md",)
    assert _reasons(report)["大.txt"] == (
        f"{folder / '大.txt'} is 0.1 MiB, over the 0.00999928 MiB limit: raise loaders.max_file_mb to ingest it"
    )
    with pytest.raises(LoaderError, match="is a character device"):
        read_bounded(Path("/dev/zero"), 1024)


def _docx_with(tmp_path: Path, name: str, members: dict[str, bytes]) -> Path:
    from docx import Document

    buf = io.BytesIO()
    Document().save(buf)
    path = tmp_path / name
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            zout.writestr(item, members.pop(item.filename, zin.read(item.filename)))
        for member, data in members.items():
            zout.writestr(member, data)
    return path


def test_zip_bombs_are_refused_by_declared_size(tmp_path: Path) -> None:
    body = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>" * (33 * 1024 * 1024 // 34)
    xml = (
        b'<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b"<w:body>" + body + b"</w:body></w:document>"
    )
    bomb = _docx_with(tmp_path, "bomb.docx", {"word/document.xml": xml})
    assert bomb.stat().st_size < 1024 * 1024
    with pytest.raises(LoaderError) as e:
        DocxLoader().load(bomb, "bomb.docx")
    assert str(e.value) == (
        f"{bomb} holds 34 MiB of XML, over the 32 MiB zhiku parses: a zip bomb, or a document too large to index"
    )
    media = _docx_with(tmp_path, "media.docx", {"word/media/big.bin": b"\0" * (3 * 1024 * 1024)})
    with pytest.raises(LoaderError) as e:
        DocxLoader(LoaderSettings(max_file_mb=2)).load(media, "media.docx")
    assert str(e.value) == (
        f"{media} unpacks to 4 MiB, over loaders.max_file_mb (2 MiB): a zip bomb, or a document too large to index"
    )


def test_a_list_nested_1000_levels_is_chunked_as_its_words(tmp_path: Path) -> None:
    lines = [" " * (2 * level) + f"- 第{level}项" for level in range(1000)]
    path = tmp_path / "nested.md"
    path.write_text("# 嵌套\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    assert path.stat().st_size > 1_000_000
    doc = MarkdownLoader().load(path, "nested.md")
    assert len(doc.text) < 20_000 and doc.text.count("项") == 1000
    chunks = chunk_document(doc, collection="c", doc_id="d", settings=ChunkShape(size=1000, overlap=200))
    assert 1 <= len(chunks) <= 20  # the words (< 20k characters) in 1,000-character chunks, not 570 chunks of spaces
    assert collapse_whitespace("a" + " " * 40 + "b\n" + " \n" * 50 + "c" + " " * 30) == "a b\n\n\nc"
    assert collapse_whitespace("  两个空格  \n\n\n末尾" * 3) == "  两个空格  \n\n\n末尾" * 3  # short runs stay


def test_an_unclosed_html_comment_hides_the_rest_of_the_page(tmp_path: Path) -> None:
    page = "<html><body><p>第一条 正文内容在这里。</p><!-- " + "垃圾 " * 300_000 + "</body></html>"
    path = tmp_path / "c.html"
    path.write_text(page, encoding="utf-8")
    doc = HtmlLoader().load(path, "c.html")
    assert doc.text == "第一条 正文内容在这里。"


@pytest.mark.parametrize(
    ("text", "encoding", "detected"),
    [
        (
            "第一條　為了規範勞動合同，保護勞動者的合法權益，制定本法。勞動者有權依法享有平等就業的權利。",
            "big5",
            "big5",
        ),
        ("この法律は、労働者の権利を保護することを目的とする。日本語のテキストです。", "shift_jis", "shift_jis"),
        ("第一条　为了规范劳动合同，保护劳动者的合法权益，制定本法。", "utf-16-le", "utf-16-le"),
        ("劳动合同法规定试用期", "utf-16-be", "utf-16-be"),
        ("Plain English in UTF-16 without a byte-order mark.", "utf-16-le", "utf-16-le"),
        ("第一条　为了规范劳动合同，保护劳动者的合法权益。", "gbk", "gb18030"),
    ],
)
def test_east_asian_encodings_are_told_apart(text: str, encoding: str, detected: str) -> None:
    assert decode_text(text.encode(encoding), Path("f.txt")) == (text, detected)


@pytest.mark.parametrize("data", [b"#", b"ei", b"\xdd\x9b", b"k\x08\x00\xa6\xa7\r", b"\x81\x40\x82", b"\x9c\xe2\x01!`"])
def test_tiny_random_files_are_refused(data: bytes) -> None:
    with pytest.raises(LoaderError, match="too short|binary file"):
        TextLoader().load(_write(data), "r.txt")


def _write(data: bytes) -> Path:
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".txt")
    os.write(fd, data)
    os.close(fd)
    return Path(name)


def test_a_locked_index_fails_before_anything_is_embedded(kb_factory, tmp_path: Path, cli_runner) -> None:  # noqa: ANN001
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "新.md").write_text(
        "# 锁\n\n第九十九条 这段文字从未被嵌入过，锁住的索引不应让它被嵌入。", encoding="utf-8"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stores, "BUSY_TIMEOUT_S", 0.2)
        kb = kb_factory(tmp_path / "idx")
    holder = sqlite3.connect(tmp_path / "idx" / "zhiku.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(IndexLocked):
            kb.ingest([folder])
        assert kb.embedder.computed == 0  # type: ignore[attr-defined]
        r = cli_runner("ingest", folder, "--index", tmp_path / "idx", "--json")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.exit_code == 1
    assert r.stdout.count("\n") == 1 and '"code": "INDEX_LOCKED"' in r.stdout


class _Exploding:
    """A loader whose every file raises the exception named by the file's stem (a loader bug, not bad input)."""

    doc_type = "text"
    suffixes = (".boom",)

    def __init__(self, settings: LoaderSettings | None = None) -> None:
        pass

    def load(self, path: Path, source: str):  # noqa: ANN201
        raise {"memory": MemoryError(), "recursion": RecursionError("deep"), "key": KeyError("x")}[path.stem]


def test_one_bad_file_never_costs_the_batch_whatever_the_exception(
    kb_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zhiku.ingest.loaders as loaders

    folder = tmp_path / "mixed"
    folder.mkdir()
    for stem in ("memory", "recursion", "key"):
        (folder / f"{stem}.boom").write_text("x", encoding="utf-8")
    (folder / "好.md").write_text(CONTRACT_LAW, encoding="utf-8")
    monkeypatch.setattr(loaders, "LOADER_CLASSES", (*loaders.LOADER_CLASSES, _Exploding))  # (docs/formats.md)
    report = kb_factory(tmp_path / "idx").ingest([folder], collection="hr")
    assert report.added == ("好.md",)
    assert _reasons(report) == {
        "key.boom": "unexpected error: KeyError: 'x'",
        "memory.boom": "unexpected error: MemoryError: ",
        "recursion.boom": "unexpected error: RecursionError: deep",
    }


def test_nul_bytes_in_paths_and_references(kb_factory, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    report = kb.ingest([Path("a\x00b.md")])
    assert [f.reason for f in report.failed] == ["invalid path: it contains a NUL byte"]
    kb.ingest([])
    with pytest.raises(NotFound):
        kb.resolve_document("\x00")
