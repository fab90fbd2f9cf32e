"""A pytest plugin that counts the assertions each test executes, to show that moving tests
(between files, into parametrized ones) kept every check: a plain `assert` that passed,
a call of a numpy.testing.assert_* function (the outermost one), a pytest.raises or
pytest.warns. Helper modules (tests/helpers) are rewritten too, so that their asserts
count.

    PYTHONPATH=tests/helpers ASSERTION_COUNT_DIR=/tmp/counts pytest -p assertion_count \\
        -o enable_assertion_pass_hook=true -m "slow or not slow" tests/ops/...

writes one JSON file per process ({nodeid: count}) into ASSERTION_COUNT_DIR.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import Counter
from pathlib import Path

import numpy.testing
import pytest

HELPERS = Path(__file__).resolve().parent
_counts: Counter = Counter()
_current: list[str] = [""]
_depth = threading.local()

pytest.register_assert_rewrite(*(p.stem for p in HELPERS.glob("*.py")
                                 if p.stem != "assertion_count"))


def _counting(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        outer = not getattr(_depth, "n", 0)
        _depth.n = getattr(_depth, "n", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _depth.n -= 1
            if outer:
                _counts[_current[0]] += 1
    return wrapper


for _name in dir(numpy.testing):
    if _name.startswith("assert_"):
        setattr(numpy.testing, _name, _counting(getattr(numpy.testing, _name)))
pytest.raises = _counting(pytest.raises)
pytest.warns = _counting(pytest.warns)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _current[0] = item.nodeid
    try:
        return (yield)
    finally:
        _current[0] = ""


def pytest_assertion_pass(item, lineno, orig, expl):
    _counts[item.nodeid] += 1


def pytest_sessionfinish(session):
    folder = os.environ.get("ASSERTION_COUNT_DIR")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{worker}-{os.getpid()}.json").write_text(json.dumps(_counts))
