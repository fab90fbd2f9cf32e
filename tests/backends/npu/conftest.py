"""Fixtures of the aclnn test files: the emulated CANN's controls and host-emulation mode."""

import pytest
from fake_cann.check_fake_cann import FakeCann

import jax_unpool as ju


@pytest.fixture(scope="module")
def fake(fake_cann_dir):
    """ctypes view of the emulator's controls: the same libnnopbase.so file the loader
    opened, so the same state."""
    return FakeCann(fake_cann_dir)


@pytest.fixture
def emulated(fake, fake_cann_dir):
    """Host-emulation mode for one test. The emulator's counters start from zero;
    `fake.live0` is the number of CANN objects alive before the test (0 unless an earlier
    test leaked): no more objects or aclrtMalloc'ed blocks may be alive after it."""
    with ju.npu.cpu_emulation(fake_cann_dir):
        fake.live0 = fake.baseline()
        allocations = fake.live_allocations()
        yield fake
    assert fake.live_objects() == fake.live0 and fake.bad_destroys() == 0
    assert fake.live_allocations() == allocations and fake.bad_frees() == 0
