"""What the Equinox and Linen layer tests share: the cases per spatial rank, PyTorch's
pool and unpool as the oracle (channels first), and the child process that shows a
framework is imported only when its layers are asked for."""

import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F
from fresh_process import run_code

TORCH = {1: (F.max_pool1d, F.max_unpool1d), 2: (F.max_pool2d, F.max_unpool2d),
         3: (F.max_pool3d, F.max_unpool3d)}
SPATIAL = {1: (13,), 2: (9, 8), 3: (5, 7, 6)}
# kernel_size, stride, padding, dilation, ceil_mode: overlapping windows, padding, ceil_mode
CASES = [(k, (3, 2, 1, 1, True)) for k in (1, 2, 3)] + [(2, ((3, 2), (2, 1), (1, 0), 1, True))]


def normal(rng, shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def torch_pool_unpool(k, x, kernel_size, stride, padding, dilation, ceil_mode):
    """PyTorch's pool of channels-first x and its unpool back to x's size:
    (values, indices, unpooled)."""
    pool, unpool = TORCH[k]
    values, indices = pool(torch.from_numpy(np.array(x)), kernel_size, stride, padding,
                           dilation, ceil_mode, return_indices=True)
    out = unpool(values, indices, kernel_size, stride, padding, output_size=x.shape[-k:])
    return values.numpy(), indices.numpy(), out.numpy()


def torch_unpool_loss(x, weights):
    """PyTorch's value and gradient w.r.t. channels-first x of
    sum(weights * max_unpool2d(values**2)) after max_pool2d(x, 3, 2, 1): overlapping
    windows, so an input can be the argmax of two windows."""
    tx = torch.from_numpy(np.array(x)).requires_grad_()
    values, indices = F.max_pool2d(tx, 3, 2, 1, return_indices=True)
    out = F.max_unpool2d(values**2, indices, 3, 2, 1, output_size=x.shape[-2:])
    loss = (torch.from_numpy(np.array(weights)) * out).sum()
    loss.backward()
    return loss.item(), tx.grad.numpy()


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
