import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def fake_cann_dir(tmp_path_factory):
    """The emulated CANN (tests/fake_cann) of every test file that loads it in this
    process: a process loads one CANN runtime, once."""
    from fake_cann import build

    return build(tmp_path_factory.mktemp("fake_cann_npu"))
