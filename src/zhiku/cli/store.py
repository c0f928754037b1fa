"""`zhiku migrate --to milvus`, `zhiku compact` and `zhiku repair`: thin over ``zhiku.stores``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

import typer

from zhiku.cli.common import ConfigOpt, IndexOpt, JsonOpt, _errors, _print_json, _progress, err, out
from zhiku.errors import InvalidInput
from zhiku.settings import load_settings


def migrate(
    to: Annotated[str, typer.Option("--to", help="Target backend: milvus.")],
    uri: Annotated[
        Optional[str],
        typer.Option("--uri", help="Milvus address (default: settings `store.uri`; env ZHIKU_STORE__URI)."),
    ] = None,
    prefix: Annotated[
        Optional[str],
        typer.Option("--prefix", help="Collection prefix in Milvus (default: settings `store.collection_prefix`)."),
    ] = None,
    db_name: Annotated[
        Optional[str], typer.Option("--db", help="Milvus database (default: settings `store.db_name`).")
    ] = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Copy an embedded index (documents, chunks, tokens, vectors, history, metadata) into Milvus without
    re-embedding; run it again to resume an interrupted copy."""
    from zhiku.api import migrate_to_milvus

    with _errors():
        if to != "milvus":
            raise InvalidInput(f"--to must be milvus, got {to!r}")
        store = {"kind": "milvus", "uri": uri, "collection_prefix": prefix, "db_name": db_name}
        settings = load_settings(config, index=index, store={k: v for k, v in store.items() if v is not None})
        with _progress(not as_json and err.is_terminal, "migrating") as progress:
            report = migrate_to_milvus(settings, on_progress=progress)
    s = settings.store
    if as_json:
        counts = {k: getattr(report, k) for k in ("documents", "chunks", "skipped", "history")}
        where = {"uri": s.uri, "db_name": s.db_name, "collection_prefix": s.collection_prefix}
        _print_json({**counts, "seconds": round(report.seconds, 3), **where})
        return
    out.print(
        f"copied {report.documents} documents ({report.chunks} chunks; {report.skipped} already there) and "
        f"{report.history} history rows from {settings.index} to Milvus at {s.uri} (prefix {s.collection_prefix}) "
        f"in {report.seconds:.1f}s\nuse it with: ZHIKU_STORE__KIND=milvus ZHIKU_STORE__URI={s.uri} "
        f"ZHIKU_STORE__COLLECTION_PREFIX={s.collection_prefix}"
        + (f" ZHIKU_STORE__DB_NAME={s.db_name}" if s.db_name else "")
    )


def compact(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Rewrite the embedded index's vector file without the rows of deleted chunks (writes do it by themselves
    past 25 % deleted rows), and delete vector files of older generations or another embedder."""
    from zhiku.api import compact_index

    with _errors():
        settings = load_settings(config, index=index)
        report = compact_index(settings)
    if as_json:
        _print_json({"index": str(settings.index), **asdict(report)})
    elif not report.compacted:
        out.print(f"nothing to compact in {settings.index} ({report.files_removed} stale vector files removed)")
    else:
        out.print(
            f"compacted the vectors of {settings.index}: {report.rows_before} -> {report.rows_after} rows, "
            f"{report.bytes_freed / 1e6:.1f} MB freed in {report.seconds:.1f}s"
        )


def repair(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Rebuild what `zhiku doctor` finds damaged in the embedded index from what is intact: zhiku.db's indexes, the
    vector files from zhiku.db's vectors, its tables from the documents' files (the damaged index moved aside); exits 1 when it cannot."""
    from zhiku.api import repair_index

    with _errors(as_json):
        settings = load_settings(config, index=index)
        r = repair_index(settings)
    if as_json:
        _print_json({"index": str(settings.index), **asdict(r), "damaged_copy": r.damaged_copy and str(r.damaged_copy)})
    elif r.damaged_copy is not None:
        lost = "".join(f"\nlost (its file is gone or unreadable): {p}" for p in r.lost)
        out.print(f"{settings.index}: zhiku.db's tables were damaged; {len(r.rebuilt)} documents ingested again from "
                  f"their files{lost}\nthe damaged index: {r.damaged_copy}")  # fmt: skip
    else:
        out.print("\n".join(r.repaired) or f"nothing to repair in {settings.index}")


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate)
    app.command("compact")(compact)
    app.command("repair")(repair)
