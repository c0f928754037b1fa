"""Sniffing and decoding text files, Chinese-first. Single-byte encodings are not guessed: a wrong guess indexes
garbage silently, an error costs the user one ``iconv``."""

from __future__ import annotations

import codecs
import re
import unicodedata
from contextlib import suppress
from pathlib import Path

from zhiku.errors import LoaderError
from zhiku.ingest.files import collapse_whitespace

BINARY_PROBE_BYTES = 8192
SNIFF_BYTES = 512
MIN_DETECT_BYTES = 8  # non-UTF-8 content shorter than this is refused (its encoding cannot be told)
DETECT_BYTES = 64  # from this size on charset-normalizer is asked (it guesses wrong on shorter Chinese text)
DETECT_PROBE_BYTES = 256 * 1024  # what it reads at most
_DETECT_AMONG = {"gb18030": "gb18030", "big5": "big5", "shift_jis": "shift_jis", "euc_jp": "euc_jp"}

_MAGIC: tuple[tuple[bytes | tuple[bytes, ...], str, str], ...] = (  # opening bytes, kind, what an error calls it
    (b"%PDF-", "pdf", "PDF"),
    (b"PK\x03\x04", "zip/office", "a ZIP archive or Office document (.docx/.xlsx/.pptx)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "ole", "a legacy Office file (.doc/.xls/.ppt; save it as .docx)"),
    ((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a"), "image", "an image"),
)
_KIND_NAMES = {kind: name for _, kind, name in _MAGIC}

# The Unicode blocks GBK text is written in (and GB18030's four-byte CJK extensions)
_TEXT_RANGES = (
    "0020-007E 00A0-024F 02C0-02DF 0370-04FF 2000-206F 2100-23FF 2460-27BF 2E80-2FDF 3000-30FF 3100-312F 31C0-31EF "
    "3200-33FF 3400-4DBF 4E00-9FFF F900-FAFF FE30-FE4F FF00-FFEF 20000-3134F"
)
_UNCOMMON_RE = re.compile(  # one character outside them and not an allowed control (counted in C)
    r"[^\t\n\r\f\v"
    + "".join(f"\\U{int(lo, 16):08x}-\\U{int(hi, 16):08x}" for lo, hi in (r.split("-") for r in _TEXT_RANGES.split()))
    + "]"
)


def sniff_bytes(head: bytes) -> str | None:
    for magic, kind, _ in _MAGIC:
        if head.startswith(magic):
            return kind
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image"
    start = head.removeprefix(codecs.BOM_UTF8).lstrip().lower()
    return "html" if start.startswith((b"<!doctype html", b"<html")) else None


def read_head(path: Path, n: int | None = SNIFF_BYTES) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as e:
        raise LoaderError(f"cannot read {path}: {e.strerror or e}") from None


def wrong_suffix(head: bytes, what: str, path: Path) -> LoaderError:
    found = sniff_bytes(head[:SNIFF_BYTES])
    kind = _KIND_NAMES.get(found or "", "HTML" if found == "html" else "text or an unknown format")
    return LoaderError(f"content is {kind}, not {what}: the file name's suffix is wrong ({path})")


def looks_like_text(text: str) -> bool:
    """At most 1% control, private-use or unassigned characters and 95% from the blocks GBK text is written in:
    GB18030 decodes many byte sequences, and this rejects the ones that come out as noise."""
    uncommon = _UNCOMMON_RE.findall(text)
    return not _control_heavy(text, uncommon) and len(uncommon) * 100 <= 5 * len(text)


def _no_text_check(text: str, encoding: str, path: Path, size: int = MIN_DETECT_BYTES) -> tuple[str, str]:
    if not text.strip():
        raise LoaderError(f"no text in file (only whitespace): {path}")
    if size < MIN_DETECT_BYTES:
        raise LoaderError(f"{path} holds {size} bytes: too short to be a document (random bytes, most likely)")
    return text, encoding


def _control_heavy(text: str, uncommon: list[str] | None = None) -> bool:
    """Over 1% control, private-use or unassigned characters (``uncommon``: the text's ``_UNCOMMON_RE`` matches)."""
    found = _UNCOMMON_RE.findall(text) if uncommon is None else uncommon
    return sum(1 for ch in found if unicodedata.category(ch) in ("Cc", "Co", "Cn", "Cs")) * 100 > len(text)


def _utf16_without_bom(data: bytes) -> tuple[str, str] | None:
    """UTF-16 with no BOM: the byte order whose text looks like text; when both do (ASCII "Hi" swapped is CJK), the
    one with the NUL bytes of ASCII characters on its high-byte positions."""
    if len(data) % 2 or len(data) < MIN_DETECT_BYTES:
        return None
    found = []
    for name in ("utf-16-le", "utf-16-be"):
        with suppress(UnicodeDecodeError):
            if looks_like_text(text := data.decode(name)):
                found.append((text, name))
    if len(found) == 2:
        probe = data[:BINARY_PROBE_BYTES]
        even, odd = probe[0::2].count(0), probe[1::2].count(0)
        found = [found[0]] if odd > 2 * even else [found[1]] if even > 2 * odd else []
    return found[0] if found else None


def _east_asian(data: bytes) -> tuple[str, str] | None:
    if len(data) < DETECT_BYTES:
        return None
    from charset_normalizer import from_bytes

    best = from_bytes(data[:DETECT_PROBE_BYTES], cp_isolation=list(_DETECT_AMONG)).best()
    name = _DETECT_AMONG.get(best.encoding, "") if best is not None else ""
    if name not in ("big5", "shift_jis", "euc_jp"):
        return None
    try:
        text = data.decode({"shift_jis": "cp932", "big5": "big5hkscs"}.get(name, name))
    except UnicodeDecodeError:
        return None
    return (text, name) if looks_like_text(text) else None


def decode_text(data: bytes, path: Path) -> tuple[str, str]:
    """``(text, encoding name)`` without the BOM; ``LoaderError`` for an empty, binary or undecidable file."""
    if not data:
        raise LoaderError(f"empty file (0 bytes): {path}")
    for bom, name in (
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ):
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(name)
            except UnicodeDecodeError as e:
                raise LoaderError(
                    f"{path} starts with a {name.upper()} byte-order mark but is not valid {name.upper()} "
                    f"(bad bytes at offset {e.start + len(bom)}); convert the file to UTF-8"
                ) from None
            return _no_text_check(text, name, path, len(data))
    if b"\x00" in data[:BINARY_PROBE_BYTES]:
        if (utf16 := _utf16_without_bom(data)) is None:
            raise LoaderError(f"binary file, not text (it contains NUL bytes): {path}")
        return _no_text_check(*utf16, path)
    if data.startswith(codecs.BOM_UTF8):
        try:
            return _no_text_check(data[len(codecs.BOM_UTF8) :].decode("utf-8"), "utf-8-sig", path)
        except UnicodeDecodeError as e:
            raise LoaderError(
                f"{path} starts with a UTF-8 byte-order mark but is not valid UTF-8 "
                f"(bad bytes at offset {e.start + 3}); convert the file to UTF-8"
            ) from None
    with suppress(UnicodeDecodeError):
        if _control_heavy(text := data.decode("utf-8")):
            raise LoaderError(f"binary file, not text (mostly control characters): {path}")
        return _no_text_check(text, "utf-8", path, len(data))
    if len(data) < MIN_DETECT_BYTES:
        raise LoaderError(
            f"{path} holds {len(data)} bytes that are not UTF-8: too short to tell its encoding; "
            "convert the file to UTF-8"
        )
    if (found := _east_asian(data)) is not None:
        return _no_text_check(*found, path)
    with suppress(UnicodeDecodeError):
        if looks_like_text(gb := data.decode("gb18030")):
            return _no_text_check(gb, "gb18030", path)
    if (utf16 := _utf16_without_bom(data)) is not None:
        return _no_text_check(*utf16, path)
    raise LoaderError(
        f"cannot detect the encoding of {path} (expected UTF-8, GB18030/GBK, Big5, Shift-JIS or UTF-16); "
        "convert the file to UTF-8"
    )


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def read_text_file(path: Path) -> tuple[str, str]:
    data = read_head(path, None)
    if sniff_bytes(data[:SNIFF_BYTES]) in _KIND_NAMES:
        raise wrong_suffix(data, "text", path)
    text, encoding = decode_text(data, path)
    return collapse_whitespace(normalize_newlines(text)), encoding
