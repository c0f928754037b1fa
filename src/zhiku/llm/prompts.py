"""Prompts in Chinese and English, built in (``zhiku/data/prompts``) or overridden from ``llm.prompts_dir``."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from string import Template

from zhiku.cache import Cache
from zhiku.errors import ConfigError

PROMPT_NAMES = ("contextual", "refine", "metadata", "caption", "multi_query", "hyde")
PROMPTS = 64  # prompt texts kept (names × languages)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def detect_language(text: str) -> str:
    """``zh`` when at least a fifth of the letters (sampled from the first 4000 characters) are CJK, else ``en``."""
    sample = text[:4000]
    letters = sum(ch.isalpha() for ch in sample)
    return "zh" if letters and len(_CJK.findall(sample)) / letters >= 0.2 else "en"


class Prompts:
    """Prompt texts by (name, language); user files win over the built-in ones."""

    def __init__(self, override_dir: Path | None = None) -> None:
        if override_dir is not None and not override_dir.is_dir():
            raise ConfigError(f"llm.prompts_dir {override_dir} is not a folder (create it or unset llm.prompts_dir)")
        self.override_dir = override_dir
        self._texts: Cache[str] = Cache(PROMPTS)

    def text(self, name: str, language: str) -> str:
        key = (name, language)
        got = self._texts.get(key)
        if got is None:
            file = f"{name}.{language}.txt"
            user = self.override_dir / file if self.override_dir is not None else None
            if user is not None and user.is_file():
                got = user.read_text(encoding="utf-8")
            else:
                try:
                    got = resources.files("zhiku").joinpath(f"data/prompts/{file}").read_text("utf-8")
                except FileNotFoundError:
                    raise ConfigError(f"no prompt {file!r} (built-in prompts: {', '.join(PROMPT_NAMES)})") from None
            self._texts.put(key, got)
        return got

    def render(self, name: str, language: str, **values: object) -> str:
        return Template(self.text(name, language)).safe_substitute({k: str(v) for k, v in values.items()})

    def id_of(self, name: str) -> str:
        """The prompt's id in cache keys: ``contextual@builtin-1`` or ``contextual@user-1``."""
        user = self.override_dir is not None and any(self.override_dir.glob(f"{name}.*.txt"))
        return f"{name}@{'user' if user else 'builtin'}-1"
