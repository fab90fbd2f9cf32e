"""The emulated CANN runtime checks itself, so the NPU tests stand on a verified emulator."""

import pytest
from fake_cann.check_fake_cann import ALL_CHECKS, FakeCann, build


@pytest.fixture(scope="module")
def fake_cann(tmp_path_factory):
    return FakeCann(build(tmp_path_factory.mktemp("fake_cann")))


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_fake_cann(fake_cann, check):
    check(fake_cann)
