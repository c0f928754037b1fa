"""Spreadsheet, slide and image throughput: rows/s, slides/s and pages/s with OCR from file to chunks (loading and chunking; embedding is
measured by bench/ingest.py), each file in a fresh process with its peak RSS.

    make bench-formats
    python bench/formats.py [--rows 100000] [--slides 2000] [--pages 5] [--json]

Files: an .xlsx of ``--rows`` rows x 6 columns (numbers, Chinese text, dates) written by openpyxl, the same rows as
a UTF-8 .csv, a .pptx of ``--slides`` slides (a title and a sentence each) written by python-pptx, and a TIFF of
``--pages`` A4 pages at 150 dpi (30 lines of Chinese each, drawn by Pillow in WenQuanYi Micro Hei) read by OCR.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def scan(path: Path, pages: int) -> Path:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 28)
    frames = []
    for p in range(pages):
        img = Image.new("L", (1240, 1754), 255)
        for i in range(30):
            text = f"第{p + 1}页第{i + 1}行：员工差旅住宿标准为一线城市每晚{600 + i}元，须在十日内报销。"
            ImageDraw.Draw(img).text((100, 120 + 50 * i), text, fill=0, font=font)
        frames.append(img)
    frames[0].save(path, save_all=True, append_images=frames[1:], compression="tiff_deflate")
    return path


def make(work: Path, rows: int, slides: int, pages: int) -> list[tuple[Path, int]]:
    import openpyxl
    import pptx

    work.mkdir(parents=True, exist_ok=True)
    data = [
        [i, f"员工{i}", f"部门{i % 37}", dt.date(2020, 1, 1) + dt.timedelta(days=i % 1000), 5000 + i % 3000, "备注"]
        for i in range(rows)
    ]
    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet("花名册")
    for row in [["工号", "姓名", "部门", "入职日期", "月薪", "备注"], *data]:
        ws.append(row)
    wb.save(work / "rows.xlsx")
    with open(work / "rows.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["工号", "姓名", "部门", "入职日期", "月薪", "备注"], *data])
    deck = pptx.Presentation()
    for i in range(slides):
        s = deck.slides.add_slide(deck.slide_layouts[1])
        s.shapes.title.text = f"第 {i + 1} 页 季度复盘"
        s.placeholders[1].text_frame.text = f"第 {i + 1} 项指标：销售额同比增长 {i % 37} %，满意度 {80 + i % 20} 分。"
    deck.save(str(work / "slides.pptx"))
    return [
        (work / "rows.xlsx", rows),
        (work / "rows.csv", rows),
        (work / "slides.pptx", slides),
        (scan(work / "scan.tif", pages), pages),
    ]


def child(path: Path) -> dict[str, Any]:
    from zhiku.ingest.chunking import chunk_document
    from zhiku.ingest.loaders import load_document
    from zhiku.settings import ChunkingSettings

    started = time.perf_counter()
    doc = load_document(path, path.name)
    chunks = chunk_document(doc, collection="bench", doc_id="d", settings=ChunkingSettings())
    seconds = time.perf_counter() - started
    peak = next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    return {"seconds": round(seconds, 2), "chunks": len(chunks), "peak_rss_mb": round(peak / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--slides", type=int, default=2000)
    ap.add_argument("--pages", type=int, default=5, help="pages of the scanned TIFF read by OCR")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-formats"))
    ap.add_argument("--json", action="store_true", help="also save the rows for the results page")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    rows = []
    for path, units in make(args.workdir, args.rows, args.slides, args.pages):
        out = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr[-3000:])
        r = json.loads(out.stdout.strip().splitlines()[-1])
        unit = {".pptx": "slides", ".tif": "pages"}.get(path.suffix, "rows")
        rows.append({"file": path.name, unit: units, **r, f"{unit}_per_s": round(units / r["seconds"], 2)})
        print(rows[-1], flush=True)
    if args.json:
        from report import save

        save("formats", rows, "make bench-formats")


if __name__ == "__main__":
    main()
