"""(h) Hostile spreadsheets and decks in one `zhiku ingest` batch: an .xlsx zip bomb, a CSV of 1,000,000 rows, a
deck of 2,000 slides, a truncated workbook, a workbook saved with a password, a corrupt deck, a truncated .doc and
a PNG declaring 10 gigapixels. Each bad file is one line, the good ones are indexed, peak RSS ≤ 1 GB. The short
version: a 200 MiB bomb, 200,001 rows, 50 slides."""

from __future__ import annotations

import csv
import json
import shutil
import zipfile
import zlib
from pathlib import Path

import pptx
from rel_common import ROOT, SIZES, report, run, zhiku_env

from zhiku.ingest.loaders.sheets import MAX_ROWS

FIXTURES = ROOT / "tests" / "fixtures" / "formats"
MIB = 1024 * 1024


def _bomb(path: Path, mib: int) -> None:
    """A workbook whose one sheet unpacks to ``mib`` MiB of spaces (~1 KB compressed per MiB)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as f:
            for _ in range(mib):
                f.write(b" " * MIB)


def _deck(path: Path, slides: int) -> None:
    """A templated deck: every slide alike (their passages embed once, through the cache)."""
    deck = pptx.Presentation()
    for _ in range(slides):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = "季度复盘"
        slide.placeholders[1].text_frame.text = "销售额同比增长，客户满意度保持稳定。"
    deck.save(str(path))


@SIZES
def test_hostile_workbooks_and_decks_in_one_batch(full: bool, tmp_path: Path, embed_cache_dir: Path) -> None:
    rows, slides, bomb_mib = (1_000_000, 2000, 1024) if full else (MAX_ROWS + 1, 50, 200)
    docs = tmp_path / "docs"
    docs.mkdir()
    _bomb(docs / "bomb.xlsx", bomb_mib)
    with open(docs / "rows.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["工号", "姓名", "部门"], *([i, f"员工{i}", "销售部"] for i in range(rows))])
    _deck(docs / "deck.pptx", slides)
    good = (FIXTURES / "SampleSS.ods").read_bytes()
    (docs / "cut.ods").write_bytes(good[: len(good) // 2])
    shutil.copy(FIXTURES / "protect.xlsx", docs / "protect.xlsx")
    (docs / "broken.pptx").write_bytes(b"PK\x03\x04" + b"\x00" * 200)
    shutil.copy(FIXTURES / "chinese-provinces.xls", docs / "provinces.xls")
    (docs / "cut.doc").write_bytes((FIXTURES / "61490.doc").read_bytes()[:4096])
    ihdr = b"IHDR" + (100_000).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00"  # 10 gigapixels declared
    chunks = [len(c[4:]).to_bytes(4, "big") + c + zlib.crc32(c).to_bytes(4, "big") for c in (ihdr, b"IDAT")]
    (docs / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(chunks))
    done = run(["ingest", str(docs), "--index", str(tmp_path / "idx"), "--json"], zhiku_env(embed_cache_dir), 1800)
    result = json.loads(done.stdout)
    reasons = {Path(f["path"]).name: f["reason"].replace(str(docs) + "/", "") for f in result["failures"]}
    report(
        "formats" if full else "formats (short)",
        csv_rows=rows,
        slides=slides,
        bomb_mib=bomb_mib,
        added=result["added"],
        failed=result["failed"],
        seconds=round(done.seconds, 1),
        peak_rss_mb=round(done.peak_rss_mb, 1),
        tracebacks=done.stderr.count("Traceback"),
    )
    assert done.rc == 1 and not done.timed_out and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert result["added"] == 2  # the deck and the real .xls
    assert reasons == {
        "bomb.xlsx": f"bomb.xlsx unpacks to {bomb_mib} MiB, over loaders.max_file_mb (100 MiB): a zip bomb, or a "
        "document too large to index",
        "rows.csv": f"rows.csv has over {MAX_ROWS:,} rows: a data set rather than documents; split it, or index an "
        "export of the rows people ask about",
        "cut.ods": reasons["cut.ods"],
        "protect.xlsx": "password-protected workbook: remove the password and ingest it again: protect.xlsx",
        "broken.pptx": reasons["broken.pptx"],
        "cut.doc": "antiword cannot read it (Read long 0x7274 not possible): cut.doc",
        "bomb.png": "image too large to read (Image size (10000000000 pixels) exceeds limit of 178956970 pixels, "
        "could be decompression bomb DOS attack.): bomb.png",
    }
    assert reasons["cut.ods"].startswith("not a readable .ods document (corrupt, truncated, or another ZIP file)")
    assert reasons["broken.pptx"].startswith("not a readable .pptx document (corrupt, truncated, or another ZIP")
    assert done.peak_rss_mb <= 1024
