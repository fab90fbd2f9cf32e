"""The pools and unpools against PyTorch's results on fixed inputs, without torch: the
golden file tests/golden/torch_2_13.npz (tests/golden/make_golden.py says how it was made).
Every rank, both layouts, batched or not, every value dtype of the contract with int32 and
int64 indices; ties, NaN, infinities, subnormals, padding, dilation, ceil_mode, windows
of padding only, overlapping windows, the CPU pool's fast path; duplicated indices,
explicit and default output sizes; the gradients and forward-mode derivatives, the
unpool's backward and its derivative; jit and vmap.

Each comparison is bit for bit (NaN payloads and signed zeros included), for three
implementations: the CPU's native kernels (this process's lowering), jax_unpool.reference,
and the XLA-ops lowering that every other platform runs (JAX_UNPOOL_BACKEND=xla, in one
child process that runs every case)."""

from __future__ import annotations

import json
import subprocess
import sys

import fresh_process
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
import torch_golden as golden
from dtypes import VALUE_DTYPES, assert_bits_equal, bits
from torch_oracle import needs_torch

import jax_unpool as ju

IMPLS = ["native", "xla", "reference"]
MODULES = {"native": ju, "reference": ju.reference}

# What each part's arrays must equal: the golden array of that name.
EXPECTED = {
    ("pool", "values"): {"values": "values", "indices": "indices"},
    ("pool", "vmap"): {"values": "values", "indices": "indices"},
    ("pool", "derivatives"): {"grad": "grad", "jvp": "jvp"},
    ("unpool", "values"): {"out": "out", "backward": "backward", "vjp": "backward"},
    ("unpool", "vmap"): {"out": "out"},
    ("unpool", "derivatives"): {"jvp": "jvp", "backward_vjp": "backward_vjp"},
}


class XlaLowering:
    """The child process that runs this session's xla parts, started with the module's
    first test (the native ones run meanwhile); `result` waits for it."""

    def __init__(self, keys: list[str], folder):
        (folder / "keys.json").write_text(json.dumps(keys))
        self.out, self.stderr = folder / "results.npz", folder / "stderr.txt"
        with self.stderr.open("w") as stderr:  # a file: a full pipe would stall the child
            self.proc = subprocess.Popen(
                [sys.executable, str(fresh_process.HELPERS / "torch_golden.py"),
                 str(folder / "keys.json"), str(self.out)],
                env=fresh_process.child_env(JAX_UNPOOL_BACKEND="xla"),
                stdout=subprocess.DEVNULL, stderr=stderr)
        self.loaded = None

    def result(self) -> tuple[dict, dict]:
        if self.loaded is None:
            self.proc.wait(timeout=600)
            assert self.proc.returncode == 0, self.stderr.read_text()[-4000:]
            with np.load(self.out) as data:
                assert str(data["switch"]) == "xla"  # the child did not run native kernels
                self.loaded = json.loads(str(data["errors"])), {k: data[k] for k in data.files}
        return self.loaded


@pytest.fixture(scope="module", autouse=True)
def xla_lowering(request, tmp_path_factory):
    keys = [golden.key(item.callspec.params["case"], item.callspec.params["part"],
                       item.callspec.params["index_dtype"])
            for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")
            and item.callspec.params.get("impl") == "xla"]
    child = XlaLowering(keys, tmp_path_factory.mktemp("golden_xla")) if keys else None
    yield child
    if child is not None and child.proc.poll() is None:
        child.proc.kill()
        child.proc.wait()


def computed(impl: str, case: dict, part: str, index_dtype: str, xla: XlaLowering
             ) -> dict[str, np.ndarray]:
    if impl != "xla":
        return golden.run(MODULES[impl], case, part, index_dtype)
    errors, saved = xla.result()
    name = golden.key(case, part, index_dtype)
    if name in errors:
        pytest.fail(f"under JAX_UNPOOL_BACKEND=xla: {errors[name]}")
    out = {}
    for k, a in saved.items():
        if k.startswith(name + "|"):
            # the child saves bfloat16 as its bits (npz has no bfloat16)
            out[k.split("|")[-1]] = a.view(jnp.bfloat16) if a.dtype == np.uint16 else a
    return out


def assert_equals_torch(case: dict, part: str, index_dtype: str, got: dict) -> None:
    want = golden.arrays(case)
    expected = {name: want[source] for name, source in EXPECTED[case["op"], part].items()
                if source in want and (name != "vjp" or case["derivatives"])}
    assert sorted(got) == sorted(expected)
    for name, value in got.items():
        if name == "indices":
            assert value.dtype == np.dtype(index_dtype)
            np.testing.assert_array_equal(value, expected[name])
        else:
            assert_bits_equal(value, expected[name])


# XLA's CPU code runs with denormals flushed to zero: subnormals compare exactly in the
# native pool only (docs/pooling.md).
NATIVE_ONLY = "/subnormal/"


def slow_for_xla_ops(case: dict, part: str) -> bool:
    """The XLA-ops pools compile for a second or so per case (a slice per kernel tap): the
    everyday run gives them the quirks, and the sweeps in one layout per rank and dtype
    (alternating: each rank meets both layouts, each layout half the dtypes); `pytest -m
    slow` the rest: the other layout, the geometries, the native pool's fast path, vmap
    (a batching rule, the same for every lowering)."""
    name = case["name"]
    if part == "vmap" or "/geometry/" in name or "/fast_path/" in name:
        return True
    if "/sweep/" in name:
        return (case["k"] + VALUE_DTYPES.index(case["dtype"]) + case["last"]) % 2 == 1
    return False


def params(op: str, part: str) -> list:
    """Every comparison of `part` of op's cases, by each implementation. jax_unpool.reference
    runs under `pytest -m slow`: its pool is the lowering's (`_pool_xla`), its unpool the
    lowering's scatter and gather (which the cases without a window hint take)."""
    out = []
    for impl in IMPLS:
        for case, p, index_dtype in golden.every_part(op):
            if p != part or (impl != "native" and NATIVE_ONLY in case["name"]):
                continue
            slow = impl == "reference" or (impl == "xla" and slow_for_xla_ops(case, p))
            out.append(pytest.param(impl, case, p, index_dtype,
                                    marks=[pytest.mark.slow] if slow else [],
                                    id=f"{impl}-{case['name']}-{index_dtype}"))
    return out


def test_the_golden_file_is_torch_2_13s():
    assert golden.torch_version().split("+")[0] == "2.13.0"


@needs_torch
def test_the_golden_file_is_what_torch_gives(monkeypatch):
    # make_golden.py --check, in this process: every array of the file, bit for bit.
    monkeypatch.syspath_prepend(str(golden.GOLDEN.parent))
    import make_golden

    fresh = make_golden.build()
    with np.load(golden.GOLDEN) as stored:
        assert sorted(stored.files) == sorted(fresh)
        assert str(stored["cases.json"]) == str(fresh.pop("cases.json"))
        for name, array in fresh.items():  # the flat buffers, one per dtype
            assert stored[name].dtype == array.dtype, name
            np.testing.assert_array_equal(bits(stored[name]), bits(array))


@pytest.mark.parametrize("impl, case, part, index_dtype", params("pool", "values"))
def test_pool_values_and_indices(impl, case, part, index_dtype, xla_lowering):
    got = computed(impl, case, part, index_dtype, xla_lowering)
    assert_equals_torch(case, part, index_dtype, got)


@pytest.mark.parametrize("impl, case, part, index_dtype", params("pool", "derivatives"))
def test_pool_gradient_and_jvp(impl, case, part, index_dtype, xla_lowering):
    got = computed(impl, case, part, index_dtype, xla_lowering)
    assert_equals_torch(case, part, index_dtype, got)


@pytest.mark.parametrize("impl, case, part, index_dtype", params("pool", "vmap"))
def test_pool_under_vmap(impl, case, part, index_dtype, xla_lowering):
    got = computed(impl, case, part, index_dtype, xla_lowering)
    assert_equals_torch(case, part, index_dtype, got)


@pytest.mark.parametrize("impl, case, part, index_dtype", params("unpool", "values"))
def test_unpool_and_its_backward(impl, case, part, index_dtype, xla_lowering):
    got = computed(impl, case, part, index_dtype, xla_lowering)
    assert_equals_torch(case, part, index_dtype, got)


@pytest.mark.parametrize("impl, case, part, index_dtype", params("unpool", "derivatives"))
def test_unpool_jvp_and_the_backwards_gradient(impl, case, part, index_dtype, xla_lowering):
    got = computed(impl, case, part, index_dtype, xla_lowering)
    assert_equals_torch(case, part, index_dtype, got)


@pytest.mark.parametrize("impl, case, part, index_dtype", params("unpool", "vmap"))
def test_unpool_under_vmap(impl, case, part, index_dtype, xla_lowering):
    got = computed(impl, case, part, index_dtype, xla_lowering)
    assert_equals_torch(case, part, index_dtype, got)


def _per_axis(k: int, v, default) -> tuple[int, ...]:
    """A window argument as torch takes it (an int, or a list of k or 1) per axis."""
    v = default if v is None else v
    v = v if isinstance(v, list) else [v]
    return tuple(v) * (k if len(v) == 1 else 1)


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in golden.cases("pool")])
def test_the_numpy_pool_oracle_is_torchs(case):
    # numpy_oracle.max_pool transcribes PyTorch's CPU loop; the tests that compare with it
    # where torch may be missing (the NPU routes, the layers, export) rely on this.
    k, want = case["k"], golden.arrays(case)
    kernel, stride, padding, dilation, ceil_mode = (*case["window"], None, 0, 1, False)[:5]
    kernel = _per_axis(k, kernel, None)
    values, indices = oracle.max_pool(
        want["x"], kernel, _per_axis(k, stride, list(kernel)), _per_axis(k, padding, 0),
        _per_axis(k, dilation, 1), ceil_mode, case["last"])
    assert_bits_equal(values, want["values"])
    np.testing.assert_array_equal(indices, want["indices"])


# (The numpy loops write into the output: an empty one, output_size 0, has no place.)
@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in golden.cases("unpool")
                                  if 0 not in c["output_size"]])
def test_the_numpy_unpool_oracles_are_torchs(case):
    want = golden.arrays(case)
    size = tuple(case["output_size"])
    assert_bits_equal(oracle.unpool_nd(want["x"], want["indices"], size, case["last"]),
                      want["out"])
    if case["backward"]:
        assert_bits_equal(oracle.gather_nd(want["g"], want["indices"], case["k"], case["last"]),
                          want["backward"])
