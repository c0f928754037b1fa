"""`zhiku init` (a ready project) and `zhiku doctor` (is this install and project ready?)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

from zhiku.cli.common import ConfigOpt, IndexOpt, JsonOpt, _errors, _print_json, err, out

MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "off": " -  "}


def init(
    directory: Annotated[
        Path, typer.Argument(help="Project folder (created if missing; default: the current folder).")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files zhiku init wrote before.")] = False,
    samples: Annotated[
        Optional[bool],
        typer.Option(
            "--samples/--no-samples",
            help="Write the sample documents and eval.yaml (default: unless docs/ already holds documents).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a ready project: settings, sample documents, an eval set and MCP client configs.

    Writes zhiku.yaml (every setting, commented), docs/ with sample documents (their licence in SOURCES.md) and
    eval.yaml over them (not when docs/ already holds documents, or with --no-samples), and MCP client configs for Claude Desktop, Cursor, VS Code, Cline and Cherry Studio
    with absolute paths; then prints the commands to ingest, ask and serve."""
    from zhiku.scaffold.init import create_project

    with _errors():
        report = create_project(directory, force=force, samples=samples)
    if as_json:
        _print_json({**asdict(report), "next": report.next_steps()})
        return
    out.print(f"zhiku project in {report.root}: {len(report.written)} files written", markup=False)
    for rel in report.written:
        out.print(f"  + {rel}", markup=False)
    if not report.samples:
        out.print("  (no sample documents: docs/ is yours; put the files to serve there)", markup=False)
    if report.kept:
        err.print(f"  kept {len(report.kept)} existing files (--force overwrites them): {', '.join(report.kept)}")
    out.print("\nNext:", markup=False)
    for step in report.next_steps():
        out.print(f"  {step}", markup=False)
    out.print("Then connect a client: see mcp-clients/README.md; check everything with `zhiku doctor`.", markup=False)


def doctor(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Check the install, settings, index, models, extras and MCP client configs, each problem with its fix.

    Models are verified against their pinned SHA-256. Exits 1 when something is broken (FAIL), 0 otherwise."""
    from zhiku.scaffold.doctor import run_doctor

    checks = run_doctor(config, index)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        _print_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        for c in checks:
            out.print(f"{MARK[c.status]}  {c.area:<8} {c.detail}", markup=False)
            if c.fix and c.status != "ok":
                out.print(f"{'':14} fix: {c.fix}", markup=False)
        warned = sum(c.status == "warn" for c in checks)
        out.print(f"\n{len(failed)} problems, {warned} warnings", markup=False)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(init)
    app.command()(doctor)
