"""Plugins: packages installed beside zhiku that add to it through Python entry points, without touching it."""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from zhiku.errors import ConfigError, ZhikuError

log = logging.getLogger("zhiku.plugins")
GROUPS = ("zhiku.loaders", "zhiku.embedders", "zhiku.rerankers", "zhiku.transforms", "zhiku.tools")
PREFIX = "plugin:"


@dataclass(frozen=True)
class PluginInfo:
    """One entry point: where it comes from, and why it could not be loaded (``error``, else None)."""

    group: str
    name: str
    value: str  # module:attribute
    distribution: str  # the installed package that declares it
    version: str
    location: str  # where that package is installed
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Plugin:
    info: PluginInfo
    obj: Any


def _info(group: str, ep: EntryPoint, error: str | None = None) -> PluginInfo:
    dist = ep.dist
    location = ""
    if dist is not None:
        with contextlib.suppress(Exception):  # exotic distribution finders
            location = str(dist.locate_file(""))
    name, version = (dist.metadata["Name"], dist.version) if dist is not None else ("?", "?")
    return PluginInfo(group, ep.name, ep.value, name, version, location, error)


@functools.cache
def load(group: str) -> tuple[Plugin, ...]:
    """Every entry point of ``group`` loaded, in name order; broken ones are logged and left out."""
    return tuple(Plugin(info, obj) for info, obj in _load_all(group) if info.ok)


@functools.cache
def _load_all(group: str) -> tuple[tuple[PluginInfo, Any], ...]:
    if group not in GROUPS:
        raise ValueError(f"unknown plugin group {group!r}; the groups are {', '.join(GROUPS)}")
    found: list[tuple[PluginInfo, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        same = (ep.name, ep.value, ep.dist.metadata["Name"] if ep.dist is not None else "?")
        if same in seen:  # one package declaring one entry point twice, word for word: not a clash
            continue
        seen.add(same)
        try:
            found.append((_info(group, ep), ep.load()))
        except Exception as e:  # a broken plugin: report, skip, carry on
            info = _info(group, ep, f"{type(e).__name__}: {e}")
            log.warning(
                "plugin %s (%s, from %s) is broken and skipped: %s", ep.name, group, info.distribution, info.error
            )
            found.append((info, None))
    # Entry points of one group that share a name are all refused: which one a ``plugin:NAME`` setting, a transform
    # name or a tool name meant cannot be told, and picking one by sort order would be a silent guess.
    out = []
    for info, obj in found:
        others = [o for o, _ in found if o.ok and o.name == info.name and o is not info] if info.ok else []
        if others:
            names = ", ".join(f"{o.distribution} {o.version} ({o.value})" for o in others)
            fix = (
                "rename one of its entry points"  # one package declaring the name twice
                if all(o.distribution == info.distribution for o in others)
                else "uninstall one of the packages or rename an entry point"
            )
            info = replace(info, error=f"the name {info.name!r} is also declared by {names}: {fix}")
            log.warning("plugin %s (%s, from %s) is skipped: %s", info.name, group, info.distribution, info.error)
            obj = None
        out.append((info, obj))
    return tuple(out)


_REPORTED: set[tuple[str, str, str]] = set()
_REFUSED: dict[tuple[str, str, str], str] = {}  # (group, name, value) -> the first reason it was refused when used


def report_problem(plugin: PluginInfo, why: str) -> None:
    """A plugin that loaded but was refused later (a tool breaking the conventions, a loader without suffixes)."""
    _REFUSED.setdefault((plugin.group, plugin.name, plugin.value), why)
    if (plugin.group, plugin.name, why) in _REPORTED:
        return
    _REPORTED.add((plugin.group, plugin.name, why))
    log.warning("plugin %s (%s, from %s) skipped: %s", plugin.name, plugin.group, plugin.distribution, why)


def installed() -> list[PluginInfo]:
    """Every plugin in every group, with its load error if any."""
    return [
        replace(info, error=_REFUSED.get((info.group, info.name, info.value), info.error))
        for group in GROUPS
        for info, _ in _load_all(group)
    ]


def build_provider(group: str, provider_name: str, settings: Any) -> Any:
    """The object a ``plugin:NAME`` provider's factory builds from ``settings``."""
    factory = provider(group, provider_name)
    try:
        return factory(settings)
    except ZhikuError:
        raise
    except Exception as e:
        name = provider_name.removeprefix(PREFIX)
        info = next(i for i, obj in _load_all(group) if i.name == name and obj is factory)
        why = f"{type(e).__name__}: {e}"
        raise ConfigError(f"{group} plugin {name!r} from {info.distribution} could not be built: {why}") from None


def provider(group: str, provider_name: str) -> Any:
    """The factory a ``plugin:NAME`` provider setting names; a clear ``ConfigError`` when it is missing or broken."""
    name = provider_name.removeprefix(PREFIX)
    for info, obj in _load_all(group):
        if info.name == name:
            if not info.ok:
                raise ConfigError(f"{group} plugin {name!r} from {info.distribution} is broken: {info.error}")
            return obj
    have = ", ".join(PREFIX + i.name for i, _ in _load_all(group) if i.ok) or "none installed"
    raise ConfigError(f"no {group} plugin named {name!r} (available: {have}); `zhiku plugins` lists them")
