"""CLI commands for the MCP surface: `zhiku serve` and `zhiku bench latency`.

The MCP SDK is imported lazily (inside the commands), so `zhiku --help` and the other commands never pay
for it. Option values are validated by the settings tree, so a bad value is one line on stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from zhiku.cli.common import ConfigOpt, IndexOpt

TransportOpt = Annotated[
    Optional[str],
    typer.Option("--transport", help="stdio | http (default: settings `server.transport`; env ZHIKU_TRANSPORT)."),
]


def _server_overrides(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@contextmanager
def _errors() -> Iterator[None]:
    """A library error is exactly one line on stderr (never wrapped: MCP clients log stderr) and exit code 1."""
    from zhiku.errors import ZhikuError

    try:
        yield
    except ZhikuError as e:
        sys.stderr.write("error: " + " ".join(str(e).split()) + "\n")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def configure_logging(level: int = logging.INFO) -> None:
    """Logs go to stderr only (under stdio, stdout carries the protocol)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("zhiku").setLevel(level)


def serve(
    transport: TransportOpt = None,
    host: Annotated[
        Optional[str],
        typer.Option(
            "--host", help="HTTP bind address (default 127.0.0.1; env ZHIKU_HOST). Non-loopback needs a token."
        ),
    ] = None,
    port: Annotated[Optional[str], typer.Option("--port", help="HTTP port (default 8765; env ZHIKU_PORT).")] = None,
    read_only: Annotated[
        Optional[bool],
        typer.Option("--read-only", help="Hide the tools that change the index (ingest, delete).", show_default=False),
    ] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the index to AI assistants over MCP (stdio, or Streamable HTTP at http://HOST:PORT/mcp)."""
    from zhiku.cli.common import _settings

    with _errors():
        settings = _settings(
            config, index, server=_server_overrides(transport=transport, host=host, port=port, read_only=read_only)
        )
        configure_logging()
        from zhiku.mcp.server import run_server

        try:
            run_server(settings)
        except Exception as e:  # a library error raised inside the transport's task group
            raise _zhiku_error_in(e) or e from None


def _zhiku_error_in(exc: BaseException) -> BaseException | None:
    """The first ``ZhikuError`` in ``exc`` or, for an exception group, in its members."""
    from zhiku.errors import ZhikuError

    if isinstance(exc, ZhikuError):
        return exc
    for member in getattr(exc, "exceptions", ()):
        found = _zhiku_error_in(member)
        if found is not None:
            return found
    return None


def bench_latency(
    transport: Annotated[str, typer.Option("--transport", help="stdio | http.")] = "stdio",
    calls: Annotated[int, typer.Option("--calls", min=1, max=100000, help="Measured calls per series.")] = 100,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=1000, help="Unmeasured calls first.")] = 10,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option("--out", help="Where to write this run's results.")] = Path("bench/latest.json"),
    baseline: Annotated[Path, typer.Option("--baseline", help="Results to compare with.")] = Path(
        "bench/baseline.json"
    ),
    update_baseline: Annotated[
        bool, typer.Option("--update-baseline", help="Also store this run as the baseline for its transport.")
    ] = False,
) -> None:
    """Measure MCP round trips through a real SDK client against a real `zhiku serve` subprocess."""
    from zhiku.cli.common import _settings
    from zhiku.errors import InvalidInput

    with _errors():
        if transport not in ("stdio", "http"):
            raise InvalidInput(f"--transport must be stdio or http, got {transport!r}")
        settings = _settings(config, index)
        configure_logging(logging.WARNING)
        from zhiku.mcp import latency

        result = latency.run_bench(settings, transport=transport, calls=calls, warmup=warmup, config=config)
        report = latency.save_and_compare(result, out=out, baseline=baseline, update_baseline=update_baseline)
    sys.stdout.write(report + "\n")


def register(app: typer.Typer) -> None:
    """Add the MCP commands to the `zhiku` app."""
    app.command("serve")(serve)
    bench = typer.Typer(help="Benchmarks.", no_args_is_help=True)
    bench.command("latency")(bench_latency)
    app.add_typer(bench, name="bench")
