"""``zhiku.yaml`` with every setting written out, commented, at its default: generated from the settings tree, so
it cannot drift from it (a test uncomments every line and gets the defaults back).

Format: ``## text`` lines are descriptions; ``# key: value`` lines are settings left at their default (remove
the ``# `` to change one, and the ``# `` of its section line); plain ``key: value`` lines are what the project
sets.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from zhiku.settings import Settings, shown_fields
from zhiku.settings_errors import section_model

WIDTH = 116


def _value(v: Any) -> str:
    """A default as one line of YAML (flow style)."""
    if isinstance(v, SecretStr):
        v = v.get_secret_value()
    if isinstance(v, Path):
        v = str(v)
    if isinstance(v, tuple):
        v = [str(x) if isinstance(x, Path) else x for x in v]
    text = yaml.safe_dump(v, allow_unicode=True, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _describe(field: FieldInfo, indent: str) -> list[str]:
    text = (field.description or "").replace("`", "")
    return textwrap.wrap(text, WIDTH - len(indent) - 3, initial_indent=f"{indent}## ", subsequent_indent=f"{indent}## ")


def _section(name: str, model: type[BaseModel], default: BaseModel, values: dict[str, Any]) -> list[str]:
    active = bool(values)
    head = "" if active else "# "
    lines = [f"{head}{name}:"]
    for key, field in shown_fields(model):
        lines += [head + line for line in _describe(field, "  ")]
        if key in values:
            lines.append(f"  {key}: {_value(values[key])}")
        else:
            lines.append(f"{head or '  # '}{'  ' if head else ''}{key}: {_value(getattr(default, key))}")
    return lines


def settings_yaml(values: dict[str, Any], header: str = "") -> str:
    """The whole settings tree as commented YAML; ``values`` (nested like the settings) are written active."""
    defaults = Settings.model_validate({})
    lines = [f"## {h}" if h else "##" for h in header.splitlines()]
    for name, field in Settings.model_fields.items():
        section = section_model(field.annotation)
        lines.append("")
        if section is not None:
            lines += _section(name, section, getattr(defaults, name), values.get(name, {}))
        else:
            lines += _describe(field, "")
            value = values[name] if name in values else getattr(defaults, name)
            lines.append(f"{'' if name in values else '# '}{name}: {_value(value)}")
    return "\n".join(lines).lstrip("\n") + "\n"
