"""Text normalisation and Chinese tokenisation."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from zhiku.cache import memoized
from zhiku.errors import ConfigError

TOKENIZER_NAME = "rjieba"


_WORD_CHAR = re.compile(r"[^\W_]")  # a token is kept if it holds one: exactly str.isalnum() for every code point
_HAN_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")


def char_pairs(normalized: str, words: Collection[str] = ()) -> list[str]:
    """The adjacent character pairs of ``normalized``'s Chinese runs that are not among ``words``: BM25 matches
    them beside the words, so a question jieba cuts unlike the document still meets it (年休几天: 年休 in 年休假)."""
    return [
        p for run in _HAN_RUN.findall(normalized) for i in range(len(run) - 1) if (p := run[i : i + 2]) not in words
    ]


def load_stopwords() -> frozenset[str]:
    """zhiku's built-in stopword list (one per line, ``#`` comments)."""
    raw = resources.files("zhiku").joinpath("data/stopwords_zh.txt").read_text(encoding="utf-8")
    return frozenset(line.strip().lower() for line in raw.splitlines() if line.strip() and not line.startswith("#"))


_DIGITS = "零一二三四五六七八九"
_ARTICLE_NUMBER = re.compile(r"第\s*(\d{1,4})\s*条")
NUMERALS = "零一二三四五六七八九十百千〇两"
# a statute article's marker opening a line (第四十七条, 第7条, then whitespace): where an article starts
ARTICLE_RE = re.compile(rf"^[ \t\u3000]*(第[{NUMERALS}\d]+条)(?=\s|$)", re.MULTILINE)


def chinese_number(n: int) -> str:
    """``n`` (1–9999) in Chinese numerals as statutes number their articles: 47 → 四十七, 101 → 一百零一, 110 → 一百一十."""
    if n < 10:
        return _DIGITS[n]
    if n < 20:
        return "十" + (_DIGITS[n % 10] if n % 10 else "")
    out, zero = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = n // value % 10
        if digit:
            out += ("零" if zero and out else "") + _DIGITS[digit] + unit
            zero = False
        else:
            zero = bool(out)
    return out


def article_numbers(text: str) -> str:
    """``text`` with article numbers in Arabic digits spelled as statutes write them: 第47条 → 第四十七条."""
    return _ARTICLE_NUMBER.sub(
        lambda m: f"第{chinese_number(int(m.group(1)))}条" if int(m.group(1)) else m.group(0), text
    )


_SPLIT_RE = re.compile(r"[\s,，、/]+")


@dataclass(frozen=True)
class Synonyms:
    """User synonyms for BM25 (``text.synonyms``): a line lists equivalent terms (split at whitespace, ``,``, ``，``,
    ``、`` or ``/``; ``#`` starts a comment). A question mentioning one term gains the others' tokens: the file can
    change any time without re-indexing."""

    groups: tuple[tuple[str, ...], ...] = ()  # each group's normalised terms, longest first

    @classmethod
    def load(cls, path: Path, normalize: Callable[[str], str]) -> Synonyms:
        """Read a synonyms file; a line with fewer than two terms is an error naming the line."""
        try:
            raw = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read synonyms file {path}: {e} (fix text.synonyms)") from None
        groups = []
        for n, line in enumerate(raw.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            terms = list(dict.fromkeys(normalize(t) for t in _SPLIT_RE.split(line) if t))
            if len(terms) < 2:
                raise ConfigError(
                    f"synonyms file {path} line {n}: {line!r} has one term; a line lists two or more equivalent "
                    "terms, e.g. `年假 年休假 带薪年休假`"
                )
            groups.append(tuple(sorted(terms, key=len, reverse=True)))
        return cls(tuple(groups))

    def expand_tokens(
        self, normalized_text: str, tokens: Sequence[str], tokenize: Callable[[str], list[str]]
    ) -> list[str]:
        """``tokens`` plus, each new token once, the tokens of the terms of every group ``normalized_text`` mentions
        that it does not contain itself."""
        groups = [g for g in self.groups if any(t in normalized_text for t in g)]
        extra = [tok for g in groups for term in g if term not in normalized_text for tok in tokenize(term)]
        return list(tokens) + [t for t in dict.fromkeys(extra) if t not in set(tokens)]


NORMALIZED_TEXTS = 4096  # texts kept normalised (passages ~0.5–3k characters, snippet windows ~200: a few MB)


class TextProcessor:
    """Normaliser + tokenizer. Build one per index (it holds the jieba dictionary and OpenCC tables)."""

    def __init__(self, *, user_dict: Path | None = None, synonyms: Path | None = None) -> None:
        self.user_dict = Path(user_dict) if user_dict else None
        self.stopwords = load_stopwords()
        self._user_dict_text = ""
        if self.user_dict is not None:
            try:
                self._user_dict_text = self.user_dict.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"cannot read user dictionary {self.user_dict}: {e} (fix text.user_dict)") from None
        self.synonyms = Synonyms.load(synonyms, self._normalize_chars) if synonyms else Synonyms()
        # NFKC, Traditional → Simplified, lower case; the same passages are normalised by every query that returns them
        # (term coverage, snippets): ~0.1 µs a character, mostly OpenCC, so each is normalised once
        self.normalize = memoized(NORMALIZED_TEXTS)(self._normalize_chars)

    @cached_property
    def _jieba(self) -> Any:  # rjieba.Jieba has no public type
        import rjieba

        jieba = rjieba.Jieba()
        for n, line in enumerate(self._user_dict_text.splitlines(), 1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            freq = None
            if len(parts) > 1:
                if not parts[1].isdigit():
                    raise ConfigError(
                        f"user dictionary {self.user_dict} line {n}: frequency {parts[1]!r} is not a number"
                    )
                freq = int(parts[1])
            jieba.add_word(self._normalize_chars(parts[0]), freq, parts[2] if len(parts) > 2 else None)
        return jieba

    @cached_property
    def _opencc(self) -> Any:  # opencc has no public types
        import opencc

        return opencc.OpenCC("t2s")

    @property
    def identity(self) -> str:
        """Identifies everything that changes index tokens; stored in the index and checked on open."""
        version = importlib.metadata.version("rjieba")
        udict = hashlib.sha256(self._user_dict_text.encode()).hexdigest()[:12] if self._user_dict_text else "none"
        return f"{TOKENIZER_NAME}-{version};search-mode;userdict={udict};t2s=True;nfkc;lower;pairs"

    def _normalize_chars(self, text: str) -> str:
        return self.simplified(unicodedata.normalize("NFKC", text)).lower()

    def simplified(self, text: str) -> str:
        return str(self._opencc.convert(text))

    def words(self, text: str) -> list[str]:
        """A text's words: search-mode cut, punctuation and whitespace dropped."""
        return self._cut(self._normalize_chars(text))

    def index_tokens(self, text: str) -> list[str]:
        """Tokens to index for a document text: its words, then its character pairs (``char_pairs``)."""
        norm = self._normalize_chars(text)
        words = self._cut(norm)
        return words + char_pairs(norm, set(words))

    def _cut(self, normalized: str) -> list[str]:
        word = _WORD_CHAR.search
        return [t for t in self._jieba.cut_for_search(normalized) if word(t)]

    def whole_words(self, normalized: str) -> list[str]:
        """A normalised text's words, each cut once (jieba's accurate mode: 重定向, not 定向 as well)."""
        word = _WORD_CHAR.search
        return [t for t in self._jieba.cut(normalized) if word(t) and t not in self.stopwords]

    def query_tokens(self, text: str) -> list[str]:
        """Distinct query terms in order: search-mode cut (as documents are indexed), stopwords and punctuation dropped."""
        norm = self.normalize(text)
        words = self._cut(norm)
        spelled = article_numbers(norm)
        if spelled != norm:  # 第47条: the terms of 第四十七条, as statutes write it, and the number (47), not 第 or 条
            words = self._cut(spelled) + [w for w in words if w not in ("第", "条")]  # 7 as well as 47
        kept = [w for w in words if w not in self.stopwords] or words
        if self.synonyms.groups:
            kept = self.synonyms.expand_tokens(
                norm, kept, lambda t: [w for w in self._cut(t) if w not in self.stopwords]
            )
        return list(dict.fromkeys(kept))

    def query_pairs(self, text: str, terms: Collection[str]) -> list[str]:
        """The character pairs of a question that BM25 matches beside its ``terms`` (stopwords left out)."""
        skip = set(terms) | self.stopwords
        return [p for p in dict.fromkeys(char_pairs(article_numbers(self.normalize(text)))) if p not in skip]


# Clause breaks: full-width clause punctuation; ASCII , ! ? ; : unless between two ASCII letters/digits (1,000 or
# 10:30 stay whole); whitespace only between two non-ASCII characters (头疼 发烧 — not "minimum wage", not
# "Go车志 BuyCarTV").
_CLAUSE_BREAK = re.compile(
    r"[，。！？；：]|(?<![0-9A-Za-z])[,!?;:]|[,!?;:](?![0-9A-Za-z])|(?<=[^\x00-\x7f])\s+(?=[^\x00-\x7f])"
)


def query_clauses(query: str, *, min_chars: int = 4, max_clauses: int = 8) -> list[str]:
    """The clauses of a long question, for embedding beside the whole (the clause channel)."""
    out: list[str] = []
    for piece in _CLAUSE_BREAK.split(query.strip()):
        piece = piece.strip()
        if not piece:
            continue
        if out and (len(piece) < min_chars or len(out[-1]) < min_chars):
            out[-1] += "，" + piece
        else:
            out.append(piece)
    return out[:max_clauses] if len(out) > 1 else []
