"""Strict skips: a skipped test fails the run unless ``tests/allowed_skips.py`` names it with its reason.

On when ``ZHIKU_STRICT_SKIPS=1`` (``.ci/run`` sets it) or, when that variable is unset, when ``CI=true``;
``ZHIKU_STRICT_SKIPS=0`` turns it off. Off, skips stay skips (a laptop without the ``dev`` extras, npm or
Chromium). On, a skip of a test, of a fixture or of a whole module at collection (``importorskip``) becomes
a failure that says what was missing, so a gap in the CI machine cannot pass as green.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Generator
from typing import Any

import pytest


def strict() -> bool:
    flag = os.environ.get("ZHIKU_STRICT_SKIPS")
    if flag is not None:
        return flag.strip() not in ("", "0", "false", "no")
    return os.environ.get("CI") == "true"


def allowed(nodeid: str) -> str | None:
    """The reason ``allowed_skips.ALLOWED_SKIPS`` gives for skipping ``nodeid`` (a pattern may match), or None."""
    from allowed_skips import ALLOWED_SKIPS

    for pattern, why in ALLOWED_SKIPS.items():
        if fnmatch.fnmatchcase(nodeid, pattern):
            return why
    return None


def _reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail(report: Any) -> None:
    report.outcome = "failed"
    report.longrepr = (
        f"skipped in strict mode (ZHIKU_STRICT_SKIPS=1 or CI=true): {_reason(report.longrepr)}\n"
        "install what it needs (`make test` installs the dev extras; .ci/run installs the MCP Inspector and "
        "Chromium), or add it to tests/allowed_skips.py with the reason it may skip"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and strict() and allowed(item.nodeid) is None:
        _fail(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and strict() and allowed(collector.nodeid) is None:
        _fail(report)


def pytest_report_header(config: pytest.Config) -> str:
    return f"strict skips: {'on' if strict() else 'off'} (ZHIKU_STRICT_SKIPS / CI; allow-list: tests/allowed_skips.py)"
