"""The aclnn calls split along N and C (issue 37 item 5): channels-last data split along C
(and N and C) on four simulated CPU devices in host-emulation mode runs each aclnn target
on its own shard -- no collective in the compiled program -- for the unpool, its backward
and the pool, 2-D NHWC, 3-D NDHWC (the 2-D ops' view) and 1-D NWC, with values equal to
numpy loops. The device count is fixed before jax starts: a fresh process.
"""

import json

import pytest
from fresh_process import run_code

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute",
               "reduce-scatter")

SHARDED = """
import json, os, re, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import jax_unpool as ju
import numpy_oracle as oracle

ju.npu.register("cpu", sys.argv[1])
mesh = jax.make_mesh((2, 2), ("a", "b"))
rng = np.random.default_rng(0)
COLLECTIVES = sys.argv[2].split(",")
results = {}
# (name, data_format, small shape, output size): C last, 4 channels, N = 4.
for name, fmt, small, size in (("2-D", "NHWC", (4, 4, 6, 4), (8, 12)),
                               ("3-D", "NDHWC", (4, 2, 2, 3, 4), (4, 4, 6)),
                               ("1-D", "NWC", (4, 6, 4), (12,))):
    k = len(size)
    unpool = getattr(ju, f"max_unpool{k}d")
    backward = getattr(ju, f"max_unpool{k}d_backward")
    pool = getattr(ju, f"max_pool{k}d_with_indices")
    x = rng.standard_normal(small).astype(np.float32)
    idx = oracle.random_indices(rng, small, int(np.prod(size)))
    g = rng.standard_normal((4, *size, 4)).astype(np.float32)
    big = rng.standard_normal((4, *size, 4)).astype(np.float32)
    xs = jax.ShapeDtypeStruct(small, np.float32)
    want_pool = oracle.max_pool(big, (2,) * k, (2,) * k, (0,) * k, (1,) * k, False, True)
    cases = {
        "unpool": (lambda x, i: unpool(x, i, output_size=size, data_format=fmt), (x, idx),
                   [oracle.unpool_nd(x, idx, size, True)]),
        "backward": (lambda g, i: backward(g, xs, i, size, data_format=fmt), (g, idx),
                     [oracle.gather_nd(g, idx, k, True)]),
        "pool": (lambda b: pool(b, 2, data_format=fmt), (big,), list(want_pool)),
    }
    for split, spec in (("C", (None,) * (k + 1) + (("a", "b"),)),
                        ("NC", ("a",) + (None,) * k + ("b",))):
        sharding = NamedSharding(mesh, P(*spec))
        for op, (f, args, want) in cases.items():
            args = [jax.device_put(a, sharding) for a in args]
            f = jax.jit(f)
            hlo = f.lower(*args).compile().as_text()
            out = jax.tree.leaves(f(*args))
            results[f"{name} {split} {op}"] = {
                "collectives": {c: len(re.findall(rf"\\b{c}(?:-start)?\\(", hlo))
                                for c in COLLECTIVES},
                "aclnn": sorted(set(re.findall(r'custom_call_target="(jax_unpool_aclnn[^"]+)"',
                                               hlo))),
                "equal": all(np.array_equal(np.asarray(o), w) for o, w in zip(out, want)),
                "sharded": [str(o.sharding.spec) for o in out],
            }
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def sharded(fake_cann_dir):
    proc = run_code(SHARDED, str(fake_cann_dir), ",".join(COLLECTIVES))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


CASES = [f"{rank} {split} {op}" for rank in ("2-D", "3-D", "1-D") for split in ("C", "NC")
         for op in ("unpool", "backward", "pool")]
TARGETS = {"unpool": "jax_unpool_aclnn_max_unpool2d_v1",
           "backward": "jax_unpool_aclnn_max_unpool2d_backward_v1",
           "pool": "jax_unpool_aclnn_max_pool2d_with_indices_v1"}


@pytest.mark.parametrize("case", CASES)
def test_channels_last_aclnn_calls_split_along_c_run_per_shard(sharded, case):
    result = sharded[case]
    rank, _, op = case.split()
    # The 2-D ops, on the views of 1-D and NDHWC, but for the 3-D pool's own.
    target = ("jax_unpool_aclnn_max_pool3d_with_argmax_v1" if (rank, op) == ("3-D", "pool")
              else TARGETS[op])
    assert result["aclnn"] == [target], result
    assert result["collectives"] == dict.fromkeys(COLLECTIVES, 0), result
    assert result["equal"], result
