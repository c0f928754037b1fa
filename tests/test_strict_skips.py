"""Strict skips (tests/strict_skips.py): in CI a skip not on the allow-list fails the run, loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path[:0] = [{str(TESTS)!r}]
from strict_skips import pytest_make_collect_report, pytest_report_header, pytest_runtest_makereport
"""
ALLOW = 'ALLOWED_SKIPS = {"test_some.py::test_allowed": "nothing to check on this machine"}\n'
TESTS_PY = """
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_allowed():
    pytest.skip("a GPU is present")

def test_gap():
    pytest.skip("chromium is not installed")

@pytest.fixture
def extra():
    pytest.importorskip("no_such_dev_extra_zhiku")

def test_needs_extra(extra):
    pass
"""
MODULE_SKIP = 'import pytest\npytest.importorskip("no_such_dev_extra_zhiku")\n\ndef test_x():\n    pass\n'


def run(tmp: Path, *targets: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (tmp / "allowed_skips.py").write_text(ALLOW, encoding="utf-8")
    (tmp / "test_some.py").write_text(TESTS_PY, encoding="utf-8")
    (tmp / "test_module.py").write_text(MODULE_SKIP, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "ZHIKU_STRICT_SKIPS")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rfEs",
            "--rootdir",
            str(tmp),
            *(targets or (str(tmp),)),
        ],
        cwd=tmp,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def summary(r: subprocess.CompletedProcess[str]) -> str:
    return r.stdout.strip().splitlines()[-1]


def test_off_skips_stay_skips(tmp_path: Path) -> None:
    r = run(tmp_path)
    assert r.returncode == 0, r.stdout
    assert "strict skips: off" in r.stdout
    assert "1 passed, 4 skipped" in summary(r)


def test_on_every_skip_off_the_allow_list_fails(tmp_path: Path) -> None:
    for env in ({"ZHIKU_STRICT_SKIPS": "1"}, {"CI": "true"}):
        r = run(tmp_path, "test_some.py", **env)
        assert r.returncode == 1, r.stdout
        assert "strict skips: on" in r.stdout
        assert "1 failed, 1 passed, 1 skipped, 1 error in " in summary(r), summary(r)
        failed = sorted(line.split(" - ")[0] for line in r.stdout.splitlines() if line.startswith(("FAILED", "ERROR")))
        assert failed == ["ERROR test_some.py::test_needs_extra", "FAILED test_some.py::test_gap"]  # fixture: setup
        assert "skipped in strict mode (ZHIKU_STRICT_SKIPS=1 or CI=true): chromium is not installed" in r.stdout
        assert (
            "skipped in strict mode (ZHIKU_STRICT_SKIPS=1 or CI=true): could not import 'no_such_dev_extra_zhiku'"
            in r.stdout
        )
        assert "SKIPPED [1] test_some.py:8: a GPU is present" in r.stdout  # the allowed one still reads as a skip


def test_on_a_module_skipped_at_collection_stops_the_run(tmp_path: Path) -> None:
    r = run(tmp_path, ZHIKU_STRICT_SKIPS="1")
    assert r.returncode == 2, r.stdout  # pytest's "interrupted: errors during collection"
    assert "ERROR test_module.py - skipped in strict mode" in r.stdout
    assert "Interrupted: 1 error during collection" in r.stdout


def test_zero_turns_it_off_even_in_ci(tmp_path: Path) -> None:
    r = run(tmp_path, CI="true", ZHIKU_STRICT_SKIPS="0")
    assert r.returncode == 0 and "1 passed, 4 skipped" in summary(r), r.stdout
