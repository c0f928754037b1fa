"""PDF ingestion throughput without embedding: load (PDFium text, tables, images) + chunk, in pages/s; and OCR
seconds per page on image-only pages.

    .venv/bin/python bench/pdf_throughput.py                       # the shared PDFs (or tests/fixtures/pdf)
    .venv/bin/python bench/pdf_throughput.py DIR --repeat 5 --ocr-pages 3 --ocr-dpi 100 --json

Loader + chunker only: no embedding, no store. Each file is loaded ``--repeat`` times after one warm-up load;
pages/s is total pages / total seconds. OCR: ``--ocr-pages`` pages of the BIThesis sample are rasterised at
100 dpi into an image-only PDF and read back with the default ``loaders.ocr_dpi``; the one-off engine load is
reported separately.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from zhiku.ingest.chunking import chunk_document  # noqa: E402
from zhiku.ingest.loaders.pdf import PdfLoader  # noqa: E402
from zhiku.settings import ChunkingSettings, LoaderSettings  # noqa: E402

SHARED = ROOT.parent / "shared" / "corpus" / "pdf"
FIXTURES = ROOT / "tests" / "fixtures" / "pdf"


def text_throughput(files: list[Path], repeat: int) -> dict[str, object]:
    loader = PdfLoader(LoaderSettings(ocr="off"))
    chunking = ChunkingSettings()
    rows = []
    total_pages = 0
    total_s = 0.0
    for path in files:
        chunk_document(loader.load(path, path.name), collection="bench", doc_id="d", settings=chunking)  # warm-up
        started = time.perf_counter()
        for _ in range(repeat):
            doc = loader.load(path, path.name)
            chunks = chunk_document(doc, collection="bench", doc_id="d", settings=chunking)
        elapsed = time.perf_counter() - started
        pages = len(doc.pages)
        rows.append(
            {
                "file": path.name,
                "pages": pages,
                "chunks": len(chunks),
                "images": len(doc.images),
                "tables": doc.text.count("\n| --- |") + doc.text.startswith("| --- |"),
                "seconds_per_load": round(elapsed / repeat, 4),
                "pages_per_s": round(pages * repeat / elapsed, 1),
            }
        )
        total_pages += pages * repeat
        total_s += elapsed
    return {"files": rows, "pages": total_pages // repeat, "pages_per_s": round(total_pages / total_s, 1)}


def ocr_seconds_per_page(pages: int, dpi: int | None = None) -> dict[str, object]:
    import pypdfium2 as pdfium

    from zhiku.ingest.loaders.ocr import OcrEngine, ocr_available

    if not ocr_available():
        return {"skipped": "the OCR extra is not installed (pip install 'zhiku[ocr]')"}
    src = pdfium.PdfDocument(str(FIXTURES / "bithesis-graduation-thesis-sample.pdf"))
    numbers = [3, 6, 8, 10, 11, 2, 4, 9][:pages]
    images = [src[n - 1].render(scale=100 / 72).to_pil().convert("L") for n in numbers]
    src.close()
    with tempfile.TemporaryDirectory() as tmp:
        scan = Path(tmp) / "scan.pdf"
        buf = io.BytesIO()
        images[0].save(buf, format="PDF", resolution=100, save_all=True, append_images=images[1:])
        scan.write_bytes(buf.getvalue())
        started = time.perf_counter()
        engine = OcrEngine()
        load_s = time.perf_counter() - started
        settings = LoaderSettings() if dpi is None else LoaderSettings(ocr_dpi=dpi)
        loader = PdfLoader(settings)
        loader._ocr = engine  # the engine loaded above, so that its load time is not counted per page
        started = time.perf_counter()
        doc = loader.load(scan, "scan.pdf")
        elapsed = time.perf_counter() - started
    return {
        "pages": len(numbers),
        "ocr_dpi": settings.ocr_dpi,
        "engine_load_s": round(load_s, 2),
        "seconds_per_page": round(elapsed / len(numbers), 2),
        "ocr_pages": list(doc.ocr_pages),
        "chars": len(doc.text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=SHARED if SHARED.is_dir() else FIXTURES)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ocr-pages", type=int, default=3, help="0 skips the OCR measurement")
    parser.add_argument("--ocr-dpi", type=int, default=None, help="default: loaders.ocr_dpi's default")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    files = sorted(args.folder.glob("*.pdf"))
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "folder": str(args.folder),
        "repeat": args.repeat,
        "text": text_throughput(files, args.repeat),
        "load_average": list(os.getloadavg()),
        "ocr": ocr_seconds_per_page(args.ocr_pages, args.ocr_dpi) if args.ocr_pages else {"skipped": "--ocr-pages 0"},
    }
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return
    print(
        f"machine: {result['machine']} · load average {os.getloadavg()[0]:.1f} · folder: {args.folder} · "
        f"repeat {args.repeat}"
    )
    for row in result["text"]["files"]:  # type: ignore[index]
        print(
            f"  {row['file']:45s} {row['pages']:3d} pages {row['chunks']:3d} chunks {row['images']:2d} images "
            f"{row['tables']:2d} tables  {row['seconds_per_load']:.3f} s/load  {row['pages_per_s']:6.1f} pages/s"
        )
    print(f"text layer: {result['text']['pages']} pages, {result['text']['pages_per_s']} pages/s (load + chunk)")  # type: ignore[index]
    print(f"OCR: {json.dumps(result['ocr'], ensure_ascii=False)}")


if __name__ == "__main__":
    main()
