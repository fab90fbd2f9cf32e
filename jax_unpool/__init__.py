"""jax-unpool: max-unpooling as first-class JAX primitives with native XLA FFI kernels."""

# First: a jax older than the supported window is an ImportError before any FFI handler is
# registered (a newer one than tested, a warning).
from jax_unpool import _compat  # noqa: F401, I001
from jax_unpool.unpooling import (
    max_unpool1d,
    max_unpool1d_backward,
    max_unpool2d,
    max_unpool2d_backward,
    max_unpool3d,
    max_unpool3d_backward,
    max_unpool1d_backward_p,
    max_unpool1d_p,
    max_unpool2d_backward_p,
    max_unpool2d_p,
    max_unpool3d_backward_p,
    max_unpool3d_p,
)
from jax_unpool.pooling import (
    max_pool1d_with_indices,
    max_pool1d_with_indices_p,
    max_pool2d_with_indices,
    max_pool2d_with_indices_p,
    max_pool3d_with_indices,
    max_pool3d_with_indices_p,
)
from jax_unpool._window import WindowIndices
from jax_unpool.window_offsets import window_indices
from jax_unpool import backends, npu, reference
from jax_unpool.backends import export_safety_checks

__version__ = "0.1.0"

__all__ = [
    "WindowIndices",
    "backends",
    "export_safety_checks",
    "max_pool1d_with_indices",
    "max_pool1d_with_indices_p",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_p",
    "max_pool3d_with_indices",
    "max_pool3d_with_indices_p",
    "max_unpool1d",
    "max_unpool1d_backward",
    "max_unpool1d_backward_p",
    "max_unpool1d_p",
    "max_unpool2d",
    "max_unpool2d_backward",
    "max_unpool2d_backward_p",
    "max_unpool2d_p",
    "max_unpool3d",
    "max_unpool3d_backward",
    "max_unpool3d_backward_p",
    "max_unpool3d_p",
    "npu",
    "reference",
    "window_indices",
]


def __getattr__(name: str):
    # The layer and export modules need optional extras (Flax, Equinox, Keras, jax2onnx):
    # import them on first use only.
    import importlib
    if name in ("nnx", "linen", "equinox", "keras", "onnx"):
        return importlib.import_module(f"jax_unpool.{name}")
    if name in ("demo", "bench"):  # where they were before the command line had its package
        return importlib.import_module(f"jax_unpool.cli.{name}")
    raise AttributeError(f"module 'jax_unpool' has no attribute {name!r}")
