"""The aclnn handlers' device path in this process, without jax or a device: the extension
module alone, the emulated CANN loaded for a device (not the host emulation), and the
recording XLA runtime stand-in (tests/fake_cann/fake_xla_ffi.cc) that calls the device
handlers with its own stream, device ordinal and scratch allocator.

    import device_mode
    ext, fake, xla, handlers = device_mode.setup(EXTENSION_PATH, FAKE_CANN_DIR, FAKE_XLA_DIR)
    code, message = xla.call(handlers["max_unpool2d"], [x, idx], [out], {"channels_last": False})

A process loads one CANN runtime, once, in one mode: run this in a process of its own.
"""

from __future__ import annotations

import importlib.util
import pathlib

from fake_cann.check_fake_cann import FakeCann
from fake_cann.fake_xla import FakeXla, handler_address


def setup(module_path: str, cann_dir: str, xla_dir: str):
    """(extension module, FakeCann, FakeXla, {handler name: address}) with the emulated CANN
    in `cann_dir` loaded in device mode."""
    spec = importlib.util.spec_from_file_location("_jax_unpool", module_path)
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    ext.load_cann(str(cann_dir), False)
    handlers = {name: handler_address(capsule)
                for name, capsule in ext.npu_registrations().items()
                if not name.endswith("_host")}
    return ext, FakeCann(pathlib.Path(cann_dir)), FakeXla(pathlib.Path(xla_dir)), handlers
