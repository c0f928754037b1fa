"""What ``zhiku plugins`` reports: every plugin after ingestion and the server have used it, so one they refuse
is listed as broken with their reason, not as ``ok``."""

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
