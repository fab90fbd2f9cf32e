"""Asks for a max_unpool2d result past XLA's array size under jit and prints the error.

Run in a child process: jaxlib aborts the process on such a shape if it reaches XLA.
Usage: oversized_result.py api|reference|primitive|vmap
"""

import sys

import jax
import jax.numpy as jnp

import jax_unpool as ju

jax.config.update("jax_enable_x64", True)  # int64 indices pass the int32 plane check

HW = (2**31, 2**31)
ENTRIES = {
    "api": lambda x, i: ju.max_unpool2d(x, i, output_size=HW),
    "reference": lambda x, i: ju.reference.max_unpool2d(x, i, output_size=HW),
    "primitive": lambda x, i: ju.max_unpool2d_p.bind(x, i, output_size=HW,
                                                     channels_last=False),
    # 8 examples of 2**59 elements each: only the folded batch passes the limit.
    "vmap": jax.vmap(lambda x, i: ju.max_unpool2d(x, i, output_size=(2**30, 2**29))),
}

entry = sys.argv[1]
shape = (8, 1, 1, 1, 1) if entry == "vmap" else (1, 1, 1, 1)
x = jax.ShapeDtypeStruct(shape, jnp.float32)
i = jax.ShapeDtypeStruct(shape, jnp.int64)
try:
    jax.jit(ENTRIES[entry]).lower(x, i)
except ValueError as error:
    print(error)
else:
    sys.exit("lowered without an error")
