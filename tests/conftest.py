import os
from pathlib import Path

import numpy as np
import pytest

# The heavy suites, opt-in: each file marks itself (`pytestmark`).
HEAVY = ("release", "slow")


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="run the heavy suites too: the tests marked release or slow "
                          "(plain `pytest` leaves them out)")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def fake_cann_dir(tmp_path_factory):
    """The emulated CANN (tests/fake_cann) of every test file that loads it in this
    process: a process loads one CANN runtime, once. $JAX_UNPOOL_FAKE_CANN_DIR names a
    directory to build it in (a build that is there already is kept): test_jax_window.py
    builds it once for every jax it runs the subset with."""
    from fake_cann import build

    prebuilt = os.environ.get("JAX_UNPOOL_FAKE_CANN_DIR")
    return build(Path(prebuilt) if prebuilt else tmp_path_factory.mktemp("fake_cann_npu"))


def _heaviness(item) -> int:
    """0 for release, 1 for slow, 2 for the rest: the heavy files start first, so that
    under xdist (a file per worker, in collection order) none is left running alone at
    the end while the other workers idle."""
    return next((i for i, m in enumerate(HEAVY) if item.get_closest_marker(m)), len(HEAVY))


def pytest_collection_modifyitems(config, items):
    if not (config.getoption("--all") or config.getoption("markexpr")):
        heavy = [item for item in items if _heaviness(item) < len(HEAVY)]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            items[:] = [item for item in items if _heaviness(item) == len(HEAVY)]
    items.sort(key=_heaviness)  # stable otherwise
