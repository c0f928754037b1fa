"""What ``zhiku plugins`` reports: every installed plugin, after each group has been used the way ingestion and the
server use it, so that a plugin refused there (a loader that cannot be built, a transform reusing a built-in's
name, a tool breaking the conventions or taking another tool's name) is listed as broken with that reason, not
as ``ok`` while the server skips it."""

from __future__ import annotations

from zhiku.plugins import PluginInfo, installed, load


def checked_plugins() -> list[PluginInfo]:
    from zhiku.ingest.loaders import plugin_loaders
    from zhiku.ingest.transforms.stage import registry

    plugin_loaders()
    registry()
    if load("zhiku.tools"):  # registered after the built-in tools, as `zhiku serve` does (nothing is opened)
        from zhiku.mcp.server import build_server
        from zhiku.settings import Settings

        build_server(Settings.model_construct(), plugins=True)  # defaults only: a bad ZHIKU_* is not our concern here
    return installed()
