"""Optional OCR with RapidOCR on ONNX Runtime (``pip install 'zhiku[ocr]'``): its models ship in its wheel, so OCR
works offline; the engine loads on first use (about a second)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from functools import reduce
from itertools import groupby
from typing import Any

from zhiku.errors import MissingDependency
from zhiku.ingest.loaders.markup import join_lines
from zhiku.ingest.loaders.pdf_layout import Line

OCR_INSTALL = "pip install 'zhiku[ocr]'"
MIN_SCORE = 0.5
TextBox = tuple[float, float, float, float, str]  # x0, top, x1, bottom, text


def ocr_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("rapidocr", "onnxruntime"))


def group_lines(boxes: Sequence[TextBox]) -> list[TextBox]:
    """Boxes as lines, by vertical centre within a line's first box."""
    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: ((b[1] + b[3]) / 2, b[0])):
        centre = (box[1] + box[3]) / 2
        for line in lines:
            if line[0][1] <= centre <= line[0][3]:
                line.append(box)
                break
        else:
            lines.append([box])
    out = []
    for line in sorted(lines, key=lambda ln: ln[0][1]):
        x0, top, x1, bottom, texts = zip(*sorted(line, key=lambda b: b[0]), strict=True)
        out.append((min(x0), min(top), max(x1), max(bottom), reduce(join_lines, texts, "")))
    return out


class OcrEngine:
    def __init__(self, threads: int = 2) -> None:
        try:
            from rapidocr import RapidOCR
        except ImportError:
            raise MissingDependency(f"OCR needs RapidOCR and ONNX Runtime: {OCR_INSTALL}") from None
        logging.getLogger("RapidOCR").setLevel(logging.WARNING)
        self._engine: Any = RapidOCR(
            params={"Global.log_level": "warning", "EngineConfig.onnxruntime.intra_op_num_threads": threads}
        )

    def page_lines(self, image: Any, scale: float) -> list[Line]:
        result = self._engine(image)
        boxes = []
        for quad, text, score in zip(
            result.boxes if result.boxes is not None else (), result.txts or (), result.scores or (), strict=False
        ):
            if float(score) < MIN_SCORE or not str(text).strip():
                continue
            xs = [float(p[0]) / scale for p in quad]
            ys = [float(p[1]) / scale for p in quad]
            boxes.append((min(xs), min(ys), max(xs), max(ys), str(text).strip()))
        if not (lines := group_lines(boxes)):
            return []
        heights = sorted(b - t for _, t, _, b, _ in lines)
        size = heights[len(heights) // 2] * 0.8
        return [Line(text, x0, top, x1, bottom, size, ocr=True) for x0, top, x1, bottom, text in lines]


def page_list(pages: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    runs = [[p for _, p in run] for _, run in groupby(enumerate(sorted(set(pages))), key=lambda ip: ip[1] - ip[0])]
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def needs_ocr_note(pages: Sequence[int], ocr_setting: str) -> str:
    if ocr_setting == "off":
        fix = "OCR is off (loaders.ocr); set loaders.ocr: auto and re-ingest"
    elif not ocr_available():
        fix = f"{OCR_INSTALL}, then re-ingest"
    else:
        fix = "OCR found no text on them"
    return f"needs OCR: page{'s' if len(pages) != 1 else ''} {page_list(pages)} without a usable text layer ({fix})"
