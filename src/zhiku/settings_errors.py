"""Settings errors a newcomer can act on: where a bad value came from, and what an unknown key was meant to be.

``load_settings`` merges defaults, ``zhiku.yaml``, ``ZHIKU_*`` variables and CLI flags into one dict before
validating it, so a validation error alone cannot say which of them holds the bad value. ``Origins`` remembers the
layers and names the one that set a key ("in zhiku.yaml", "from ZHIKU_RETRIEVAL__TOP_K", "from the command line");
an unknown key gets the closest real one ("did you mean retrieval.top_k?"). ``check_env_names`` catches the
``ZHIKU_*`` variables pydantic-settings ignores without a word: an unknown section and a single underscore.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from zhiku.errors import ConfigError

REFERENCE = "every key: docs/settings.md"
SERVER_ALIASES = ("transport", "host", "port", "token")  # ZHIKU_TRANSPORT, … as short forms of ZHIKU_SERVER__*


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field's ``annotation`` is (a section such as ``retrieval``), or None for a value."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def env_name(loc: tuple[str, ...]) -> str:
    return "ZHIKU_" + "__".join(loc).upper()


def _has(data: Mapping[str, Any], loc: tuple[str, ...]) -> bool:
    node: Any = data
    for key in loc:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


@dataclass(frozen=True)
class Origins:
    """The layers of one ``load_settings`` call, highest precedence first: flags, environment, file."""

    path: Path
    file: Mapping[str, Any]
    env: Mapping[str, str]
    flags: Mapping[str, Any]

    def of(self, loc: tuple[str, ...]) -> str:
        """Where the value at ``loc`` came from, as words that follow the value ("from ZHIKU_X", "in zhiku.yaml")."""
        if _has(self.flags, loc):
            return "from the command line"
        if len(loc) == 2 and loc[0] == "server" and loc[1] in SERVER_ALIASES and f"ZHIKU_{loc[1].upper()}" in self.env:
            return f"from ZHIKU_{loc[1].upper()}"
        for n in range(len(loc), 0, -1):  # a whole section may come as JSON in ZHIKU_SECTION
            if env_name(loc[:n]) in self.env:
                return f"from {env_name(loc[:n])}"
        if _has(self.file, loc):
            return f"in {self.path}"
        return f"set it in {self.path} or {env_name(loc)}"


def _fields_at(model: type[BaseModel], parent: tuple[str, ...]) -> list[str]:
    for key in parent:
        field = model.model_fields.get(key)
        section = section_model(field.annotation if field is not None else None)
        if section is None:
            return []
        model = section
    return list(model.model_fields)


def _unknown(model: type[BaseModel], loc: tuple[str, ...], origin: str) -> str:
    close = difflib.get_close_matches(loc[-1], _fields_at(model, loc[:-1]), n=1, cutoff=0.6)
    from_env = origin.startswith("from ZHIKU_")
    where = "" if origin.startswith("set it") else origin
    hint = ""
    if close:
        meant = (*loc[:-1], close[0])
        hint = f"did you mean {env_name(meant) if from_env else '.'.join(meant)}? "
    return f"unknown setting {'.'.join(loc)} {where}".rstrip() + f" ({hint}{REFERENCE})"


def explain(e: ValidationError, model: type[BaseModel], origins: Origins | None) -> str:
    """One line for all of a validation's errors: each key, what is wrong, the value and where it came from."""
    parts = []
    for err in e.errors():
        loc = tuple(str(x) for x in err["loc"])
        origin = origins.of(loc) if origins is not None else f"set it in zhiku.yaml or {env_name(loc)}"
        if err["type"] == "extra_forbidden":
            parts.append(_unknown(model, loc, origin))
            continue
        sep = "; " if origin.startswith("set it") else " "
        parts.append(f"{'.'.join(loc)}: {err['msg']} (got {err.get('input')!r}{sep}{origin})")
    return "invalid settings: " + "; ".join(parts)


def check_env_names(model: type[BaseModel], environ: Mapping[str, str]) -> None:
    """Refuse ``ZHIKU_SECTION__KEY`` variables whose section does not exist, and ``ZHIKU_SECTION_KEY`` (one
    underscore) ones that name a real key: pydantic-settings ignores both, so the setting silently stays as it was.
    ``ZHIKU_<SECTION>_API_KEY`` is the default home of a section's secret (its ``api_key_env``), not a typo.
    """
    sections = [name for name, f in model.model_fields.items() if section_model(f.annotation) is not None]
    for name in sorted(environ):
        if not name.startswith("ZHIKU_"):
            continue
        rest = name[len("ZHIKU_") :].lower()
        head, nested, _ = rest.partition("__")
        if nested and head not in model.model_fields:
            close = difflib.get_close_matches(head, sections, n=1, cutoff=0.6)
            meant = f"did you mean ZHIKU_{close[0].upper()}__{name.split('__', 1)[1]}? " if close else ""
            raise ConfigError(
                f"invalid settings: unknown setting section {head!r} in {name} ({meant}sections: "
                f"{', '.join(sections)}; {REFERENCE})"
            )
        if nested:
            continue
        for section in sections:
            key = rest[len(section) + 1 :]
            if rest.startswith(section + "_") and key != "api_key" and key in _fields_at(model, (section,)):
                raise ConfigError(
                    f"invalid settings: {name} is not read: a key inside a section takes two underscores, "
                    f"{env_name((section, key))} ({REFERENCE})"
                )
