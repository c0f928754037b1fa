"""Shared pytest fixtures. Add fixtures in helper modules and re-export them here, so that session-scoped
ones have one instance per session (a fixture imported into several test modules would be built per module)."""

from fake_openai import fake_openai  # noqa: F401
from helpers_kb import cached_embedder, corpus, e5, embed_cache_dir, kb_factory  # noqa: F401
from helpers_models import minilm_dir, tiny_cross_encoder  # noqa: F401
from mcp_fixtures import mcp_index  # noqa: F401
from milvus_fixtures import milvus_uri  # noqa: F401
from oauth_issuer import team_server  # noqa: F401
from strict_skips import pytest_make_collect_report, pytest_report_header, pytest_runtest_makereport  # noqa: F401
