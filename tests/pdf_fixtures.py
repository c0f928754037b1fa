"""PDF fixtures: the committed sample PDFs (tests/fixtures/pdf, see its SOURCES.md) and PDFs derived from them
at run time: an image-only "scan", an encrypted copy, truncated and mislabelled files."""

from __future__ import annotations

import io
from pathlib import Path

import pypdf
import pypdfium2 as pdfium

PDF_DIR = Path(__file__).parent / "fixtures" / "pdf"
PAPER = PDF_DIR / "elegantpaper-cn.pdf"  # 5 pages, a three-line table on page 3
THESIS = PDF_DIR / "bithesis-graduation-thesis-sample.pdf"  # 11 pages, logo p1, figure + 5-column table p6
NOTE = PDF_DIR / "elegantnote-cn.pdf"  # 10 pages, a regression table on page 7
BOOK = PDF_DIR / "elegantbook-cn.pdf"  # 13 pages, 2 cover images p1, a ruled table p6

PASSWORD = "知库-密码1"

THESIS_TABLE = """表 1-1 统计表

| 项目 | 产量 | 销量 | 产值 | 比重 |
| --- | --- | --- | --- | --- |
| 手机 | 1000 | 10000 | 500 | 50% |
| 计算机 | 5500 | 5000 | 220 | 22% |
| 笔记本电脑 | 1100 | 1000 | 280 | 28% |
| 合计 | 17600 | 16000 | 1000 | 100% |"""

PAPER_TABLE = """表 1: Auto MPG and Price

|  | (1) | (2) |
| --- | --- | --- |
| mpg | -238.90*** | -49.51 |
|  | (53.08) | (86.16) |
| weight |  | 1.75*** |
|  |  | (0.641) |
| constant | 11,253*** | 1,946 |
|  | (1,171) | (3,597) |
| obs | 74 | 74 |
| R2 | 0.220 | 0.293 |"""

# Page 8 of the thesis, as its text layer gives it (and as OCR should read it back from a scan of the page).
THESIS_P8 = (
    "结论作为毕业设计（论文）正文的最后部分单独排写，但不加章号。结论是对整个论文主要结果的总结。"
    "在结论中应明确指出本研究的创新点，对其应用前景和社会、经济价值等加以预测和评价，"
    "并指出今后进一步在本研究方向进行研究工作的展望与设想。结论部分的撰写应简明扼要，突出创新性。阅后删除此段。"
)


def scanned_pdf(path: Path, src: Path = THESIS, pages: tuple[int, ...] = (8,), dpi: int = 100) -> Path:
    """An image-only PDF of ``pages`` (1-based) of ``src``: each page rasterised, no text layer."""
    doc = pdfium.PdfDocument(str(src))
    try:
        images = [doc[p - 1].render(scale=dpi / 72).to_pil().convert("L") for p in pages]
    finally:
        doc.close()
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", resolution=dpi, save_all=True, append_images=images[1:])
    path.write_bytes(buf.getvalue())
    return path


def encrypted_pdf(path: Path, src: Path = PAPER, password: str = PASSWORD) -> Path:
    """The first page of ``src``, AES-128 encrypted with user password ``password``."""
    reader = pypdf.PdfReader(str(src))
    writer = pypdf.PdfWriter()
    writer.add_page(reader.pages[0])
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="AES-128")
    with open(path, "wb") as f:
        writer.write(f)
    return path


def truncated_pdf(path: Path, src: Path = PAPER, keep: int = 40_000) -> Path:
    path.write_bytes(src.read_bytes()[:keep])
    return path


def handmade_pdf(path: Path, content: str, *, pua_font: bool = False) -> Path:
    """A one-page A4 PDF whose page draws ``content`` (PDF operators) with Helvetica as ``/F1``.

    With ``pua_font`` the font's ToUnicode map sends A-Z to private-use characters (U+E000…): the page then
    has a text layer whose text is garbage, like a PDF with a broken font.
    """
    tounicode = b"""/CIDInit /ProcSet findresource begin 12 dict begin begincmap
/CMapName /PUA def 1 begincodespacerange <00> <FF> endcodespacerange
1 beginbfrange <41> <5A> <E000> endbfrange endcmap CMapName currentdict /CMap defineresource pop end end"""
    data = content.encode("latin-1")
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica" + (b" /ToUnicode 6 0 R" if pua_font else b"") + b" >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream",
        font,
        b"<< /Length %d >>\nstream\n" % len(tounicode) + tounicode + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def grid_table_ops() -> str:
    """A ruled 3x3 grid table (every cell boxed) with a sentence above it."""
    ops = ["BT /F1 11 Tf 72 760 Td (Quarterly figures of the sales team are listed below.) Tj ET", "0.8 w"]
    xs, ys = [100, 220, 340, 460], [700, 680, 660, 640]
    ops += [f"{xs[0]} {y} m {xs[-1]} {y} l S" for y in ys] + [f"{x} {ys[0]} m {x} {ys[-1]} l S" for x in xs]
    cells = [["Region", "Units", "Revenue"], ["North", "1200", "36000"], ["South", "950", "28500"]]
    for r, row in enumerate(cells):
        for c, text in enumerate(row):
            ops.append(f"BT /F1 10 Tf {xs[c] + 6} {ys[r] - 14} Td ({text}) Tj ET")
    return "\n".join(ops)
