"""The results page marks a figure stale only when src/'s code changed since it was measured, not its prose."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("report", Path(__file__).parents[1] / "bench" / "report.py")
assert _spec is not None and _spec.loader is not None
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

BEFORE = '''"""A module."""

LIMIT = 3  # how many


def f(x):
    """Twice ``x``."""
    return 2 * x


class C:
    """A class."""

    def g(self):
        """Nothing."""
'''


@pytest.mark.parametrize(
    "after",
    [
        BEFORE.replace('"""A module."""', '"""A module, said better."""'),
        BEFORE.replace("# how many", "# how many there may be"),
        BEFORE.replace('    """Twice ``x``."""\n', ""),
        BEFORE.replace('"""Nothing."""', '"""Nothing at all,\n        in two lines."""'),
        BEFORE.replace("return 2 * x", "return (\n        2 * x\n    )"),
    ],
    ids=["module docstring", "comment", "docstring removed", "method docstring", "layout"],
)
def test_prose_and_layout_leave_the_code_the_same(after: str) -> None:
    assert report.code_of(after) == report.code_of(BEFORE)


@pytest.mark.parametrize(
    "after",
    [
        BEFORE.replace("LIMIT = 3", "LIMIT = 4"),
        BEFORE.replace("return 2 * x", "return 3 * x"),
        BEFORE.replace('        """Nothing."""\n', '        """Nothing."""\n        return 1\n'),
        BEFORE.replace('def f(x):\n    """Twice ``x``."""', 'def f(x):\n    "Twice."\n    x += 0'),
    ],
    ids=["constant", "expression", "statement added", "statement after a docstring"],
)
def test_a_change_of_code_is_a_change(after: str) -> None:
    assert report.code_of(after) != report.code_of(BEFORE)


def test_a_string_that_is_not_a_docstring_is_code() -> None:
    before = "def f():\n    x = 1\n    'a'\n"
    assert report.code_of(before) != report.code_of(before.replace("'a'", "'b'"))
