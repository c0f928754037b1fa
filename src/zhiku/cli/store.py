"""CLI commands about storage backends: `zhiku migrate --to milvus`, `zhiku compact`.

Thin over ``zhiku.stores.migrate``: flags become store settings (validated by the settings tree), library errors
become one line on stderr with exit code 1, ``--json`` prints exactly one JSON object.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

IndexOpt = Annotated[
    Optional[Path], typer.Option("--index", help="The SQLite index to copy (default: settings `index`, .zhiku).")
]
ConfigOpt = Annotated[
    Optional[Path], typer.Option("--config", help="Settings file (default: ./zhiku.yaml if present).")
]


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
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Copy an embedded index (documents, chunks, tokens, vectors, history, metadata) into Milvus without
    re-embedding; run it again to resume an interrupted copy."""
    from zhiku.api import migrate_to_milvus
    from zhiku.cli.common import _errors, _progress, err
    from zhiku.errors import InvalidInput
    from zhiku.settings import load_settings

    with _errors():
        if to != "milvus":
            raise InvalidInput(f"--to must be milvus, got {to!r}")
        store = {"kind": "milvus", "uri": uri, "collection_prefix": prefix, "db_name": db_name}
        settings = load_settings(config, index=index, store={k: v for k, v in store.items() if v is not None})
        with _progress(not as_json and err.is_terminal, "migrating") as progress:
            report = migrate_to_milvus(settings, on_progress=progress)
    s = settings.store
    if as_json:
        sys.stdout.write(
            json.dumps(
                {
                    "documents": report.documents,
                    "chunks": report.chunks,
                    "skipped": report.skipped,
                    "history": report.history,
                    "seconds": round(report.seconds, 3),
                    "uri": s.uri,
                    "db_name": s.db_name,
                    "collection_prefix": s.collection_prefix,
                },
                ensure_ascii=False,
            )
            + "\n"
        )
        return
    sys.stdout.write(
        f"copied {report.documents} documents ({report.chunks} chunks; {report.skipped} already there) and "
        f"{report.history} history rows from {settings.index} to Milvus at {s.uri} (prefix {s.collection_prefix}) "
        f"in {report.seconds:.1f}s\nuse it with: ZHIKU_STORE__KIND=milvus ZHIKU_STORE__URI={s.uri} "
        f"ZHIKU_STORE__COLLECTION_PREFIX={s.collection_prefix}"
        + (f" ZHIKU_STORE__DB_NAME={s.db_name}" if s.db_name else "")
        + "\n"
    )


def compact(
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
    index: Annotated[
        Optional[Path], typer.Option("--index", help="The index to compact (default: settings `index`, .zhiku).")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Rewrite the embedded index's vector file without the rows of deleted chunks (writes do it by themselves
    past `store.compact_dead_fraction`), and delete vector files of older generations or another embedder."""
    from zhiku.api import compact_index
    from zhiku.cli.common import _errors
    from zhiku.settings import load_settings

    with _errors():
        settings = load_settings(config, index=index)
        report = compact_index(settings)
    if as_json:
        sys.stdout.write(json.dumps({"index": str(settings.index), **asdict(report)}) + "\n")
        return
    if not report.compacted:
        sys.stdout.write(
            f"nothing to compact in {settings.index} ({report.files_removed} stale vector files removed)\n"
        )
        return
    sys.stdout.write(
        f"compacted the vectors of {settings.index}: {report.rows_before} -> {report.rows_after} rows, "
        f"{report.bytes_freed / 1e6:.1f} MB freed in {report.seconds:.1f}s\n"
    )


def register(app: typer.Typer) -> None:
    """Add the storage commands to the `zhiku` app."""
    app.command("migrate")(migrate)
    app.command("compact")(compact)
