"""Image files, read by OCR as scanned PDF pages are (``zhiku[ocr]``): a page per frame (a multi-page TIFF's pages),
the picture stored with the passage that holds its text."""

from __future__ import annotations

import io
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from zhiku.errors import LoaderError
from zhiku.ingest.files import MIB, read_bounded
from zhiku.ingest.loaders.encoding import wrong_suffix
from zhiku.ingest.loaders.markup import encode_image, usable_image
from zhiku.ingest.loaders.pdf import PdfLoader, _Page
from zhiku.types import PageSpan, SourceDoc

A4_WIDTH = 595.0  # OCR boxes are scaled to an A4 page's points, the units the PDF layout rules are tuned for
OCR_MAX_SIDE = 1754  # pixels OCR reads at most (A4 at 150 dpi, as a scanned PDF page): a 12 MP photo would take GBs


class ImageLoader(PdfLoader):
    doc_type: str = "image"
    suffixes: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        data = read_bounded(path, int(self.settings.max_file_mb * MIB))
        try:
            from PIL import Image, ImageSequence, UnidentifiedImageError
        except ImportError:  # no OCR extra (it brings Pillow): listed as needing OCR, as a scanned PDF is
            return SourceDoc(source, self.doc_type, path.stem, "", (PageSpan(1, 0, 0),), "image", needs_ocr_pages=(1,))
        pages = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(data)) as img:
                    frames = getattr(img, "n_frames", 1)
                    for n, frame in enumerate(ImageSequence.Iterator(img), 1):
                        pages.append(self._frame(frame.convert("RGB"), n, data if frames == 1 else None))
        except UnidentifiedImageError:
            raise wrong_suffix(data[:1024], "an image Pillow reads", path) from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise LoaderError(f"image too large to read ({e}): {path}") from None
        except (OSError, ValueError, SyntaxError) as e:  # Pillow's decoders: truncated or corrupt data
            raise LoaderError(f"not a readable image, corrupt or truncated ({e}): {path}") from None
        doc = self._assemble(pages, source, path, "")
        return replace(doc, doc_type=self.doc_type, title=path.stem, encoding="image")

    def _frame(self, image: Any, number: int, original: bytes | None) -> _Page:
        page = _Page(number, A4_WIDTH, image.height * A4_WIDTH / image.width)
        if (engine := self._ocr_engine()) is None:
            page.needs_ocr = True
        else:
            small = image.copy()
            small.thumbnail((OCR_MAX_SIDE, OCR_MAX_SIDE))
            page.lines, page.ocr = engine.page_lines(small, small.width / A4_WIDTH), True
        found = (usable_image(original) if original else encode_image(image)) if self.settings.images else None
        if found is not None:
            page.images = [((0.0, 0.0, page.width, page.height), *found)]
        return page
