"""What the Equinox and Linen layer tests share: the cases per spatial rank, the oracles
of a pool and unpool (channels first): numpy's loops, and PyTorch where it is installed;
and the child process that shows a framework is imported only when its layers are asked
for."""

import jax.numpy as jnp
import numpy as np
import numpy_oracle
import pytest
from fresh_process import run_code
from torch_oracle import F, needs_torch, torch

# The oracles a layer test compares with.
ORACLES = ["numpy", pytest.param("torch", marks=needs_torch)]
SPATIAL = {1: (13,), 2: (9, 8), 3: (5, 7, 6)}
# kernel_size, stride, padding, dilation, ceil_mode: overlapping windows, padding, ceil_mode
CASES = [(k, (3, 2, 1, 1, True)) for k in (1, 2, 3)] + [(2, ((3, 2), (2, 1), (1, 0), 1, True))]


def normal(rng, shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def _per_axis(k: int, v) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * k


def pool_unpool(which: str, k, x, kernel_size, stride, padding, dilation, ceil_mode):
    """The oracle's pool of channels-first x and its unpool back to x's size:
    (values, indices, unpooled)."""
    if which == "torch":
        pool, unpool = getattr(F, f"max_pool{k}d"), getattr(F, f"max_unpool{k}d")
        values, indices = pool(torch.from_numpy(np.array(x)), kernel_size, stride, padding,
                               dilation, ceil_mode, return_indices=True)
        out = unpool(values, indices, kernel_size, stride, padding, output_size=x.shape[-k:])
        return values.numpy(), indices.numpy(), out.numpy()
    values, indices = numpy_oracle.max_pool(
        np.array(x), *(_per_axis(k, v) for v in (kernel_size, stride, padding, dilation)),
        ceil_mode)
    return values, indices, numpy_oracle.unpool_nd(values, indices, tuple(x.shape[-k:]))


def unpool_loss(which: str, x, weights):
    """The oracle's value and gradient w.r.t. channels-first x of
    sum(weights * max_unpool2d(values**2)) after max_pool2d(x, 3, 2, 1): overlapping
    windows, so an input can be the argmax of two windows."""
    if which == "torch":
        tx = torch.from_numpy(np.array(x)).requires_grad_()
        values, indices = F.max_pool2d(tx, 3, 2, 1, return_indices=True)
        out = F.max_unpool2d(values**2, indices, 3, 2, 1, output_size=x.shape[-2:])
        loss = (torch.from_numpy(np.array(weights)) * out).sum()
        loss.backward()
        return loss.item(), tx.grad.numpy()
    x, weights = np.array(x), np.array(weights)
    size = x.shape[-2:]
    values, indices = numpy_oracle.max_pool(x, (3, 3), (2, 2), (1, 1), (1, 1), False)
    value = (weights * numpy_oracle.unpool_nd(values**2, indices, size)).sum()
    # d/dvalues: the unpool's transpose gathers the weights; the pool's adds at the argmax
    d_values = 2 * values * numpy_oracle.gather_nd(weights, indices, 2)
    return value, numpy_oracle.scatter_add_nd(d_values, indices, size)


def import_error_without(framework: str, module: str) -> str:
    """In a fresh process: `import jax_unpool` leaves `framework` unimported, and the
    ImportError that `jax_unpool.<module>` raises where it is missing (returned)."""
    proc = run_code(
        "import sys\n"
        "import jax_unpool\n"
        f"assert {framework!r} not in sys.modules, 'import jax_unpool imported {framework}'\n"
        f"sys.modules[{framework!r}] = None  # what an environment without it looks like\n"
        "try:\n"
        f"    jax_unpool.{module}\n"
        "except ImportError as error:\n"
        "    print(error)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()
