"""Building the transform stage from the settings (the ``transforms`` and ``llm`` sections)."""

from __future__ import annotations

from zhiku.ingest.transforms.stage import TransformProgress, TransformStage, resolve
from zhiku.ingest.transforms.store import EnrichmentStore
from zhiku.llm.cache import LLM_CACHE_FILE, ReplyCache
from zhiku.llm.service import LLMService, PlanningService, build_service
from zhiku.settings import Settings


def parse_transform_names(spec: str | None) -> tuple[str, ...] | None:
    """``--transform contextual,metadata`` as names (None: use the settings; ``none``: no transform)."""
    if spec is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    return () if names in ((), ("none",)) else names


def build_stage(
    settings: Settings,
    store: EnrichmentStore | None,
    *,
    on_progress: TransformProgress | None = None,
    planning: bool = False,
) -> TransformStage | None:
    """The stage of ``transforms.enabled``. None when none is enabled and nothing was ever enriched; an empty stage
    when none is enabled but older enrichments must be cleared on re-ingest."""
    names = tuple(settings.transforms.enabled)
    if not names and (store is None or not store.path.exists()):
        return None
    transforms = resolve(names)
    service: LLMService | None
    if planning:
        llm = settings.llm
        path = settings.cache_dir / LLM_CACHE_FILE if settings.cache_dir else None  # read, never created, by a dry run
        cache = ReplyCache(path, read_only=True) if path is not None and path.exists() else None
        service = PlanningService(llm.model or "(llm.model unset)", vision_model=llm.vision_model, cache=cache)
    else:
        service = build_service(settings.llm, settings.cache_dir) if names else None
    return TransformStage(transforms, service, settings.transforms, settings.llm, store=store, on_progress=on_progress)
