"""A generated corpus of hostile files for the reliability suite (issue 12 (b)).

``make_corpus(root, seed)`` writes ≥ 300 files of these kinds under ``root/bad`` and five good ones under
``root/bad/good`` (which must always be indexed), and returns the expectation for each path: ``"fail"`` (it
must fail with a reason), ``"ok"`` (it must be indexed) or ``"either"`` (a partial PDF may be readable).
Nothing here is downloaded: PDFs derive from the committed tests/fixtures/pdf samples.
"""

from __future__ import annotations

import io
import os
import random
import socket
import zipfile
from collections.abc import Callable
from pathlib import Path

from pdf_fixtures import NOTE, PAPER, encrypted_pdf

GOOD = "第{n}条 劳动者享有平等就业和选择职业的权利，用人单位应当依法建立和完善劳动规章制度。"
SPARSE_MB = 101  # over the default loaders.max_file_mb (100), as sparse files: no disk is used
Expect = dict[Path, str]


def _docx_bytes(document_xml: bytes | None = None, extra: dict[str, bytes] | None = None) -> bytes:
    from docx import Document

    buf = io.BytesIO()
    d = Document()
    d.add_paragraph(GOOD.format(n="一"))
    d.save(buf)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "word/document.xml" and document_xml is not None:
                data = document_xml
            zout.writestr(item, data)
        for name, data in (extra or {}).items():
            zout.writestr(name, data)
    return out.getvalue()


W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10))
    + "]>"
)


def _weird_names(bad: Path, rng: random.Random, expect: Expect) -> None:
    names = [
        "劳动法.md".encode("gbk"),
        "工资规定.txt".encode("gbk"),
        "勞動基準法.md".encode("big5"),
        "労働法.md".encode("shift_jis"),
        b"\xff\xfe\xfd.md",
        b"caf\xe9.txt",
        b"-rf.md",
        b"--help.md",
        b"-.txt",
        b"new\nline.md",
        b"tab\there.md",
        b"carriage\rreturn.txt",
        b" leading space.md",
        "\u202eevil-rtl.md".encode(),
        b"x" * 240 + b".md",
        "空格 与 标点！.md".encode(),
        b"semi;colon&amp.md",
        b"quote'\"name.md",
        b"star*question?.md",
        b"dollar$(whoami).md",
    ]
    for _ in range(20):  # random bytes, as a broken archive or file system would leave them
        names.append(bytes(b for b in rng.randbytes(8) if b not in (0, 0x2F)) + b".md")
    for raw in names:
        path = os.path.join(os.fsencode(bad / "names"), raw)
        with open(path, "w", encoding="utf-8") as f:
            f.write(GOOD.format(n=1) + "\n")  # one text: embedded once, whatever the name
        expect[Path(os.fsdecode(path))] = "ok"


def _special(bad: Path, rng: random.Random, expect: Expect) -> None:
    d = bad / "special"
    for i in range(5):
        os.mkfifo(d / f"pipe{i}.md")
        expect[d / f"pipe{i}.md"] = "fail"
    for i, target in enumerate(["/dev/zero", "/dev/zero", "/dev/urandom", "/dev/null", "/dev/zero"]):
        (d / f"dev{i}.txt").symlink_to(target)
        expect[d / f"dev{i}.txt"] = "fail"
    for i in range(3):
        path = d / f"sock{i}.md"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
        expect[path] = "fail"
    for i in range(4):
        (d / f"loop{i}.md").symlink_to(d / f"loop{i}.md")
        (d / f"a{i}.txt").symlink_to(d / f"b{i}.txt")
        (d / f"b{i}.txt").symlink_to(d / f"a{i}.txt")
        (d / f"dangling{i}.md").symlink_to(d / f"nowhere{i}.md")
        expect.update({d / f"loop{i}.md": "fail", d / f"a{i}.txt": "fail", d / f"b{i}.txt": "fail"})
        expect[d / f"dangling{i}.md"] = "fail"
    os.mkdir(d / "loopdir")
    (d / "loopdir" / "self").symlink_to(d / "loopdir")  # a directory symlink loop: never followed


def _sizes(bad: Path, rng: random.Random, expect: Expect) -> None:
    d = bad / "size"
    for suffix in (".txt", ".md", ".pdf", ".docx", ".html"):
        path = d / f"sparse{suffix}"
        with open(path, "wb") as f:
            f.truncate(SPARSE_MB * 1024 * 1024)
        expect[path] = "fail"
    body = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>" * (33 * 1024 * 1024 // 34)
    xml = b'<?xml version="1.0"?><w:document ' + W_NS.encode() + b"><w:body>" + body + b"</w:body></w:document>"
    (d / "bomb-xml.docx").write_bytes(_docx_bytes(xml))
    (d / "bomb-media.docx").write_bytes(_docx_bytes(extra={"word/media/a.bin": b"\0" * (101 * 1024 * 1024)}))
    expect.update({d / "bomb-xml.docx": "fail", d / "bomb-media.docx": "fail"})
    laughs = LAUGHS + "<w:document " + W_NS + "><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
    (d / "laughs.docx").write_bytes(_docx_bytes(laughs.encode()))
    (d / "laughs.html").write_text(LAUGHS + "<html><body><p>&lol9;</p></body></html>", encoding="utf-8")
    expect.update({d / "laughs.docx": "either", d / "laughs.html": "either"})


def _pdfs(bad: Path, rng: random.Random, expect: Expect) -> None:
    d = bad / "pdf"
    data = PAPER.read_bytes()
    for i in range(30):
        keep = rng.randrange(8, len(data) - 1)
        (d / f"truncated{i}.pdf").write_bytes(data[:keep])
        expect[d / f"truncated{i}.pdf"] = "either"
    for i in range(3):
        encrypted_pdf(d / f"encrypted{i}.pdf", src=PAPER if i else NOTE, password=f"pw-{i}")
        expect[d / f"encrypted{i}.pdf"] = "fail"
    for i in range(10):
        garbage = bytearray(data[:4096])
        for _ in range(200):
            garbage[rng.randrange(8, len(garbage))] = rng.randrange(256)
        (d / f"garbled{i}.pdf").write_bytes(bytes(garbage))
        expect[d / f"garbled{i}.pdf"] = "either"
    (d / "header-only.pdf").write_bytes(b"%PDF-1.7\n")
    (d / "png-inside.pdf").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    expect.update({d / "header-only.pdf": "fail", d / "png-inside.pdf": "fail"})


def _office_and_html(bad: Path, rng: random.Random, expect: Expect) -> None:
    d = bad / "markup"
    good = _docx_bytes()
    for i in range(15):
        (d / f"truncated{i}.docx").write_bytes(good[: rng.randrange(4, len(good) - 1)])
        (d / f"pk-garbage{i}.docx").write_bytes(b"PK\x03\x04" + rng.randbytes(rng.randrange(10, 5000)))
        expect.update({d / f"truncated{i}.docx": "fail", d / f"pk-garbage{i}.docx": "fail"})
    (d / "html-as.docx").write_text("<html><body>x</body></html>", encoding="utf-8")
    expect[d / "html-as.docx"] = "fail"
    for depth in (1_000, 10_000, 100_000):
        (d / f"deep{depth}.html").write_text("<div>" * depth + "第一条 深层嵌套的正文。" + "</div>" * depth)
        expect[d / f"deep{depth}.html"] = "ok"
    (d / "unclosed-table.html").write_text("<table>" * 50_000 + "<tr><td>第一条 表格。", encoding="utf-8")
    expect[d / "unclosed-table.html"] = "either"
    for i in range(3):
        junk = "<!-- " + "垃圾注释 " * (100_000 * (i + 1))
        (d / f"comment{i}.html").write_text(f"<html><body><p>{GOOD.format(n=i)}</p>{junk}</body></html>")
        expect[d / f"comment{i}.html"] = "ok"
    (d / "only-comment.html").write_text("<!-- " + "x" * 1_000_000, encoding="utf-8")
    (d / "script-only.html").write_text("<script>" + "var a=1;" * 100_000 + "</script>", encoding="utf-8")
    expect.update({d / "only-comment.html": "fail", d / "script-only.html": "fail"})


def _text(bad: Path, rng: random.Random, expect: Expect) -> None:
    d = bad / "text"
    for i in range(50):
        (d / f"tiny{i}.txt").write_bytes(bytes([0x80 | rng.randrange(128)]) + rng.randbytes(rng.randrange(0, 7)))
        expect[d / f"tiny{i}.txt"] = "fail"
    for i in range(40):
        suffix = (".txt", ".md")[i % 2]
        (d / f"binary{i}{suffix}").write_bytes(rng.randbytes(rng.randrange(64, 200_000)))
        expect[d / f"binary{i}{suffix}"] = "fail"
    for suffix in (".txt", ".md", ".text", ".markdown", ".html", ".pdf", ".docx"):
        (d / f"empty{suffix}").write_bytes(b"")
        expect[d / f"empty{suffix}"] = "fail"
    for i, ws in enumerate(
        [" ", "\n", "\t", "\u3000", " \n\t", "\r\n", "\u00a0", " " * 1_000_000, "\n" * 100_000, "\f"]
    ):
        (d / f"blank{i}.md").write_text(ws * (1 if len(ws) > 100 else 1000), encoding="utf-8")
        expect[d / f"blank{i}.md"] = "fail"
    for levels in (1_000, 3_000):
        lines = [" " * (2 * n) + f"- 第{n}项" for n in range(levels)]
        (d / f"nested{levels}.md").write_text("\n".join(lines), encoding="utf-8")
        expect[d / f"nested{levels}.md"] = "ok"
    (d / "spaces-between.txt").write_text(("第一条" + " " * 100_000 + "正文。\n") * 5, encoding="utf-8")
    (d / "one-line-2mb.txt").write_text("试用期" * 350_000, encoding="utf-8")
    expect.update({d / "spaces-between.txt": "ok", d / "one-line-2mb.txt": "ok"})
    for i, (text, enc) in enumerate(
        [
            ("第一條　勞動者享有平等就業和選擇職業的權利，用人單位應當依法建立和完善勞動規章制度。", "big5"),
            ("この法律は、労働者の権利を保護することを目的とする。日本語のテキストです。", "shift_jis"),
            (GOOD.format(n=1), "utf-16-le"),
            (GOOD.format(n=2), "utf-16-be"),
            (GOOD.format(n=3), "utf-32"),
            (GOOD.format(n=4), "gb18030"),
            (GOOD.format(n=5), "utf-8-sig"),
        ]
    ):
        (d / f"enc{i}.txt").write_bytes(text.encode(enc))
        expect[d / f"enc{i}.txt"] = "ok"
    for i in range(5):
        (d / f"nul{i}.md").write_bytes(GOOD.format(n=i).encode() + b"\x00" * (i + 1) + GOOD.format(n=i).encode())
        (d / f"ctrl{i}.txt").write_bytes(bytes(rng.randrange(1, 32) for _ in range(500)))
        expect.update({d / f"nul{i}.md": "fail", d / f"ctrl{i}.txt": "fail"})
    for i, magic in enumerate([b"%PDF-1.4\n", b"PK\x03\x04", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0", b"GIF89a"]):
        (d / f"mislabel{i}.md").write_bytes(magic + rng.randbytes(300))
        (d / f"mislabel{i}.txt").write_bytes(magic + rng.randbytes(300))
        expect.update({d / f"mislabel{i}.md": "fail", d / f"mislabel{i}.txt": "fail"})
    (d / "latin1.txt").write_bytes("Café déjà vu, naïve façade ".encode("latin-1") * 20)
    expect[d / "latin1.txt"] = "either"


def _good(bad: Path, expect: Expect) -> None:
    g = bad / "good"
    g.mkdir()
    for i in range(5):
        (g / f"好文件{i}.md").write_text("# 好文件\n\n" + GOOD.format(n=100) + "\n", encoding="utf-8")
        expect[g / f"好文件{i}.md"] = "ok"


KINDS: tuple[Callable[[Path, random.Random, Expect], None], ...] = (
    _weird_names,
    _special,
    _sizes,
    _pdfs,
    _office_and_html,
    _text,
)


def make_corpus(root: Path, seed: int = 12) -> tuple[Path, Expect]:
    """Write the corpus under ``root/bad``; returns that folder and the expectation per file."""
    bad = root / "bad"
    for sub in ("names", "special", "size", "pdf", "markup", "text"):
        (bad / sub).mkdir(parents=True)
    rng = random.Random(seed)
    expect: Expect = {}
    for kind in KINDS:
        kind(bad, rng, expect)
    _good(bad, expect)
    return bad, expect
