"""The image files of an index, content-addressed (``<index>/images/<sha256>.<png|jpg>``): written once, before the
chunks that refer to them, through a temporary name, so a crash never leaves half a file under a real name."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from zhiku.errors import InvalidInput, NotFound, StoreError

IMAGES_DIR = "images"
_ID_RE = re.compile(r"[0-9a-f]{64}\.(?:png|jpg)")


class ImageStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, image_id: str) -> Path:
        if not isinstance(image_id, str) or not _ID_RE.fullmatch(image_id):
            raise InvalidInput(f"invalid image id {image_id!r}: expected 64 hex digits and .png or .jpg")
        return self.root / image_id

    def put(self, image_id: str, data: bytes) -> None:
        target = self.path(image_id)
        if hashlib.sha256(data).hexdigest() != image_id.split(".", 1)[0]:
            raise StoreError(f"image {image_id} does not match its bytes (SHA-256 {hashlib.sha256(data).hexdigest()})")
        if target.exists():
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            raise StoreError(
                f"cannot write image {target}: {e.strerror or e}; check the index directory's permissions"
            ) from None

    def read(self, image_id: str) -> bytes:
        path = self.path(image_id)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no image {image_id} in this index (re-ingest the document that holds it)") from None
        except OSError as e:
            raise StoreError(f"cannot read image {path}: {e.strerror or e}") from None
