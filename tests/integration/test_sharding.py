"""Both ops, and the pools, on several devices: split along the plane dims (N, C, in
either layout, of every spatial rank) the compiled step runs our CPU kernels on each
device's shard with no communication; any split (H too) gives the numpy result; shard_map
with a replicated operand differentiates correctly.

The devices are simulated CPU devices in a fresh process (`sharded_cases.py`: 2-D on 8
devices; `sharded_ranks.py`: 1-D and 3-D on 4; `sharded_pools.py`: the pools), because
this process's backend already started with one device. That process saves the compiled
HLO and the results; the assertions and the numpy oracle are here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import fresh_process
import numpy as np
import numpy_oracle as oracle
import pytest
import sharded_cases as cases
import sharded_pools as pool_cases

COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce",
               "reduce-scatter")
TARGETS = {"jax_unpool_max_unpool_v2", "jax_unpool_max_unpool_backward_v2"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded")
    fresh_process.run_ok("sharded_cases.py", str(out))
    return out


@pytest.fixture(scope="module")
def results(run) -> dict:
    return json.loads((run / "results.json").read_text())


def collective_counts(hlo: str) -> dict[str, int]:
    # An instruction is `name = shape op(...)`; async collectives are `op-start(...)`.
    return {op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo)) for op in COLLECTIVES}


def custom_call_targets(hlo: str) -> set[str]:
    return set(re.findall(r'custom_call_target="([^"]+)"', hlo))


def expected_step(op: str, values, indices, ct, data_format: str):
    """numpy's (op(values), VJP of op at values with cotangent ct)."""
    last = data_format in ("NHWC", "HWC")
    if op == "max_unpool2d":
        return (oracle.unpool(values, indices, cases.OUTPUT_HW, last),
                oracle.gather(ct, indices, last))
    return (oracle.gather(values, indices, last),
            oracle.unpool(ct, indices, cases.OUTPUT_HW, last))


@pytest.mark.parametrize("op", cases.OPS)
@pytest.mark.parametrize("case", cases.COLLECTIVE_FREE)
def test_plane_split_runs_our_kernels_with_no_collectives(run, case, op):
    hlo = (run / f"{case}.{op}.hlo.txt").read_text()
    assert collective_counts(hlo) == dict.fromkeys(COLLECTIVES, 0)
    assert custom_call_targets(hlo) >= TARGETS  # forward and gradient kernels


@pytest.mark.parametrize("op", cases.OPS)
@pytest.mark.parametrize("case", list(cases.CASES))
def test_sharded_step_matches_numpy(run, case, op):
    data = np.load(run / f"{case}.{op}.npz")
    out, grad = expected_step(op, data["values"], data["indices"], data["ct"],
                              cases.CASES[case][0])
    np.testing.assert_array_equal(data["out"], out)
    np.testing.assert_array_equal(data["grad"], grad)


@pytest.mark.parametrize("op", cases.OPS)
@pytest.mark.parametrize("case", [c for c in cases.CASES if c != "NCHW-H-auto"])
def test_results_keep_the_operands_sharding(results, case, op):
    # On an explicit mesh the sharding is part of the type; on an auto mesh XLA picks it,
    # and splitting the plane dims is what it keeps. (An auto H split comes back whole.)
    r = results["cases"][f"{case}.{op}"]
    assert r["out_spec"] == r["in_spec"]
    assert r["grad_spec"] == r["in_spec"]


@pytest.mark.parametrize("op", cases.OPS)
@pytest.mark.parametrize("case", list(cases.VMAP_CASES))
def test_vmap_over_split_inner_dims_runs_per_shard(run, results, case, op):
    # The vmapped axis is folded into N so that N's split stays a split of whole blocks.
    key = f"vmap.{case}.{op}"
    assert collective_counts((run / f"{key}.hlo.txt").read_text()) == \
        dict.fromkeys(COLLECTIVES, 0)
    data = np.load(run / f"{key}.npz")
    for b in range(cases.VMAP_BATCH):
        out, grad = expected_step(op, data["values"][b], data["indices"][b], data["ct"][b],
                                  cases.VMAP_CASES[case][0])
        np.testing.assert_array_equal(data["out"][b], out)
        np.testing.assert_array_equal(data["grad"][b], grad)
    r = results["vmap"][key]
    assert r["out_spec"] == r["in_spec"] and r["grad_spec"] == r["in_spec"]


@pytest.mark.parametrize("case", list(cases.SHARD_MAP_CASES))
def test_shard_map_vjp_with_a_replicated_operand(run, results, case):
    op, replicated = cases.SHARD_MAP_CASES[case]
    data = np.load(run / f"shard_map.{case}.npz")
    values, indices = data["values"], data["indices"]
    full = (cases.DEVICES, *values.shape[1:]), (cases.DEVICES, *indices.shape[1:])
    out, grad = expected_step(op, np.broadcast_to(values, full[0]),
                              np.broadcast_to(indices, full[1]), data["ct"], "NCHW")
    if replicated == "values":  # every device used the same values: gradients add up
        grad = grad.sum(axis=0, keepdims=True)
    np.testing.assert_array_equal(data["out"], out)
    np.testing.assert_array_equal(data["grad"], grad)
    expected_spec = ["d"] if replicated == "indices" else [None]
    assert results["shard_map"][case]["grad_spec"] == expected_spec + [None] * 3


@pytest.fixture(scope="module")
def ranks_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded_ranks")
    fresh_process.run_ok("sharded_ranks.py", str(out))
    return out


def _size(fmt: str) -> tuple[int, ...]:
    return (10,) if len(fmt) == 3 else (4, 6, 4)  # as in sharded_ranks.py


@pytest.mark.jax_window
@pytest.mark.parametrize("case", ["NCW-N", "NCW-NC", "NWC-N", "NCDHW-N", "NCDHW-NC",
                                  "NDHWC-N"])
def test_1d_3d_split_along_n_and_c_runs_our_kernels_per_shard(ranks_run, case):
    hlo = (ranks_run / f"{case}.hlo.txt").read_text()
    assert collective_counts(hlo) == dict.fromkeys(COLLECTIVES, 0), hlo
    assert custom_call_targets(hlo) == TARGETS
    saved = np.load(ranks_run / f"{case}.npz")
    fmt = case.split("-")[0]
    last, size = fmt.endswith("C"), _size(fmt)
    y = oracle.unpool_nd(saved["x"], saved["indices"], size, last)
    np.testing.assert_array_equal(saved["y"], y)
    np.testing.assert_array_equal(saved["g"], oracle.gather_nd(2 * y, saved["indices"],
                                                               len(size), last))
    assert saved["same_sharding"]


@pytest.mark.jax_window
@pytest.mark.parametrize("case", ["NWC-C", "NWC-NC", "NDHWC-C", "NDHWC-NC"])
def test_channels_last_1d_3d_split_along_c_runs_our_kernels_per_shard(ranks_run, case):
    # NWC and NDHWC reach the kernels as NHWC views: C stays split, nothing is gathered.
    hlo = (ranks_run / f"{case}.hlo.txt").read_text()
    assert collective_counts(hlo) == dict.fromkeys(COLLECTIVES, 0)
    assert custom_call_targets(hlo) == TARGETS
    saved = np.load(ranks_run / f"{case}.npz")
    size = _size(case.split("-")[0])
    y = oracle.unpool_nd(saved["x"], saved["indices"], size, channels_last=True)
    np.testing.assert_array_equal(saved["y"], y)
    np.testing.assert_array_equal(saved["g"], oracle.gather_nd(2 * y, saved["indices"],
                                                               len(size), channels_last=True))
    assert saved["same_sharding"]


@pytest.mark.jax_window
@pytest.mark.parametrize("case", ["shard_map-NCW-x", "shard_map-NDHWC-indices"])
def test_1d_3d_shard_map_vjp_with_a_replicated_operand(ranks_run, case):
    saved = np.load(ranks_run / f"{case}.npz")
    x, indices, ct = saved["x"], saved["indices"], saved["ct"]
    fmt = case.split("-")[1]
    last, size = fmt.endswith("C"), _size(fmt)
    devices = ct.shape[0]
    x_all = np.broadcast_to(x, (devices, *x.shape[1:]))
    i_all = np.broadcast_to(indices, (devices, *indices.shape[1:]))
    np.testing.assert_array_equal(saved["y"], oracle.unpool_nd(x_all, i_all, size, last))
    grad = oracle.gather_nd(ct, i_all, len(size), last)
    if case.endswith("-x"):  # every device used the same x: its gradients add up
        grad = grad.sum(axis=0, keepdims=True)
    np.testing.assert_array_equal(saved["g"], grad)


# --------------------------------------------------------------------------------------
# The pools (sharded_pools.py): every rank and layout split along N and C
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pools_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded_pools")
    fresh_process.run_ok("sharded_pools.py", str(out))
    return out


@pytest.mark.parametrize("case", list(pool_cases.CASES))
def test_pools_split_along_n_and_c_run_the_native_pool_per_shard(pools_run, case):
    fmt, _, window, spec, kind = pool_cases.CASES[case]
    hlo = (pools_run / f"{case}.hlo.txt").read_text()
    assert collective_counts(hlo) == dict.fromkeys(COLLECTIVES, 0)
    assert "jax_unpool_max_pool_v1" in custom_call_targets(hlo)
    saved = np.load(pools_run / f"{case}.npz")
    k, last = sum(d in "DHW" for d in fmt), fmt.endswith("C")
    values, indices = oracle.max_pool(saved["x"], (window[0],) * k, (window[1],) * k,
                                      (window[2],) * k, (1,) * k, False, last)
    np.testing.assert_array_equal(saved["values"], values)
    np.testing.assert_array_equal(saved["indices"], indices)
    # the gradient: each cotangent added at its argmax
    planes = (lambda a: np.moveaxis(a, -1, 0 if a.ndim == k + 1 else 1)) if last else \
        (lambda a: a)
    x, ct, idx = (planes(saved[n]) for n in ("x", "ct", "indices"))
    lead = x.shape[:x.ndim - k]
    grad = np.zeros((*lead, int(np.prod(x.shape[-k:]))), np.float32)
    for pos in np.ndindex(*idx.shape):
        grad[(*pos[:len(lead)], idx[pos])] += ct[pos]
    np.testing.assert_array_equal(planes(saved["grad"]), grad.reshape(x.shape))
    if kind == "explicit":  # the sharding is the type: the results keep the operands'
        specs = json.loads((pools_run / "specs.json").read_text())[case]
        want = [list(e) if isinstance(e, tuple) else e for e in spec]
        assert all(s[:len(want)] == want for s in specs), specs
