"""User synonyms for BM25 (``text.synonyms``): one group of equivalent terms per line.

File format: terms separated by whitespace, ``,``, ``，``, ``、`` or ``/``; ``#`` starts a comment line. A group
like ``开除 辞退 解除劳动合同`` makes a text that contains any of the terms (after the index's normalisation:
NFKC, Traditional → Simplified, lower case) also match the others: the question's BM25 terms gain the other terms'
tokens, so the file can change any time without re-indexing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zhiku.errors import ConfigError

_SPLIT_RE = re.compile(r"[\s,，、/]+")


@dataclass(frozen=True)
class Synonyms:
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

    def expansions(self, normalized_text: str) -> list[str]:
        """The terms of every group that ``normalized_text`` mentions, which it does not contain itself."""
        out: list[str] = []
        for g in self.groups:
            if any(t in normalized_text for t in g):
                out.extend(t for t in g if t not in normalized_text)
        return out

    def expand_tokens(
        self, normalized_text: str, tokens: Sequence[str], tokenize: Callable[[str], list[str]]
    ) -> list[str]:
        """``tokens`` plus the tokens of the expansions of ``normalized_text``, each new token once."""
        extra = [tok for term in self.expansions(normalized_text) for tok in tokenize(term)]
        return list(tokens) + [t for t in dict.fromkeys(extra) if t not in set(tokens)]
