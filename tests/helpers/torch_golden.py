"""PyTorch's results on fixed inputs (tests/golden/torch_2_13.npz, written by
tests/golden/make_golden.py), and jax_unpool run on the same cases: the oracle of
tests/ops/test_golden_torch.py, which needs no torch.

A case is pool or unpool; its parts are what a test compares: "values" (the pool's values
and indices; the unpool's result and its backward), "derivatives" (gradients and
forward-mode derivatives) and "vmap" (the batch as jax.vmap of one example). `run` gives
jax_unpool's arrays of a part, for the implementation that `module` is: jax_unpool (the
lowering this process chose) or jax_unpool.reference.

    python tests/helpers/torch_golden.py KEYS.json OUT.npz

runs the parts that KEYS.json names (`key(...)`) in this process and saves their arrays
(or their error): tests/ops/test_golden_torch.py runs it with JAX_UNPOOL_BACKEND=xla, the
XLA-ops lowering of every non-CPU platform.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers/, as a script
from dtypes import needs_x64

from jax_unpool._compat import enable_x64

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "torch_2_13.npz"
INDEX_DTYPES = ("int32", "int64")
INPUTS = ("x", "indices", "ct", "tangent", "g", "ct2")  # the rest are torch's results
SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


@functools.cache
def _file() -> tuple[dict, dict[str, np.ndarray]]:
    with np.load(GOLDEN) as data:
        meta = json.loads(str(data["cases.json"]))
        return meta, {name: data[name] for name in data.files if name != "cases.json"}


def cases(op: str) -> list[dict]:
    """The cases of op ("pool" or "unpool"), as make_golden.py wrote them."""
    return [c for c in _file()[0]["cases"] if c["op"] == op]


def torch_version() -> str:
    return _file()[0]["torch"]


def arrays(case: dict) -> dict[str, np.ndarray]:
    """The case's arrays, value arrays in the case's dtype (bfloat16 from its bits)."""
    meta, buffers = _file()
    prefix = case["name"] + "/"
    out = {}
    for key, (buffer, offset, shape) in meta["arrays"].items():
        if key.startswith(prefix):
            size = int(np.prod(shape))
            a = buffers[buffer][offset:offset + size].reshape(shape)
            out[key[len(prefix):]] = a.view(jnp.bfloat16) if a.dtype == np.uint16 else a
    return out


def data_format(case: dict, batched: bool | None = None) -> str:
    batched = case["batched"] if batched is None else batched
    spatial = SPATIAL[case["k"]]
    return ("N" if batched else "") + (spatial + "C" if case["last"] else "C" + spatial)


def _window(case: dict) -> tuple:
    return tuple(tuple(a) if isinstance(a, list) else a for a in case["window"])


def _pool(module, case: dict, index_dtype: str, batched: bool | None = None):
    pool = getattr(module, f"max_pool{case['k']}d_with_indices")
    fmt = data_format(case, batched)
    return lambda x: pool(x, *_window(case), data_format=fmt, index_dtype=index_dtype)


def _unpool(module, case: dict, indices: np.ndarray, batched: bool | None = None):
    unpool = getattr(module, f"max_unpool{case['k']}d")
    fmt = data_format(case, batched)
    size = tuple(case["output_size"])
    if case["hint"]:
        window = [tuple(a) if isinstance(a, list) else a
                  for a in (case["kernel"], case["stride"], case["padding"])]
        return lambda x, i=indices: unpool(x, i, *window, output_size=size, data_format=fmt)
    return lambda x, i=indices: unpool(x, i, output_size=size, data_format=fmt)


def _unpool_backward(module, case: dict, x, indices: np.ndarray):
    backward = getattr(module, f"max_unpool{case['k']}d_backward")
    size, fmt = tuple(case["output_size"]), data_format(case)
    return lambda g: backward(g, x, indices, size, data_format=fmt)


def _pool_part(module, case: dict, part: str, index_dtype: str):
    """The part's function of the case's arrays, returning a dict of jax_unpool's arrays."""
    if part == "values":
        pool = _pool(module, case, index_dtype)
        return lambda a: dict(zip(("values", "indices"), pool(a["x"])))
    if part == "vmap":  # the batch as jax.vmap of one example
        pool = jax.vmap(_pool(module, case, index_dtype, False))
        return lambda a: dict(zip(("values", "indices"), pool(a["x"])))
    pool = _pool(module, case, index_dtype)
    values = lambda x: pool(x)[0]
    return lambda a: {"grad": jax.vjp(values, a["x"])[1](a["ct"])[0],
                      "jvp": jax.jvp(values, (a["x"],), (a["tangent"],))[1]}


def _unpool_part(module, case: dict, part: str, index_dtype: str):
    """The part's function of the case's arrays, returning a dict of jax_unpool's arrays."""
    if part == "vmap":
        unpool = jax.vmap(_unpool(module, case, None, False))
        return lambda a: {"out": unpool(a["x"], a["indices"].astype(index_dtype))}

    def values(a):
        indices = a["indices"].astype(index_dtype)
        unpool = _unpool(module, case, indices)
        out = {"out": unpool(a["x"])}
        if case["backward"]:
            # The backward, and (floats) the unpool's own reverse-mode derivative: a gather.
            out["backward"] = _unpool_backward(module, case, a["x"], indices)(a["g"])
            if case["derivatives"]:
                out["vjp"] = jax.vjp(unpool, a["x"])[1](a["g"])[0]
        return out

    def derivatives(a):
        indices = a["indices"].astype(index_dtype)
        unpool = _unpool(module, case, indices)
        out = {"jvp": jax.jvp(unpool, (a["x"],), (a["tangent"],))[1]}
        if case["backward_vjp"]:
            backward = _unpool_backward(module, case, a["x"], indices)
            out["backward_vjp"] = jax.vjp(backward, a["g"])[1](a["ct2"])[0]
        return out

    return values if part == "values" else derivatives


def parts(case: dict, i: int) -> list[tuple[str, str]]:
    """(part, index dtype) of every comparison of the i-th case of its op: the values,
    the derivatives and vmap where they apply (floats; vmap for the batched float32
    sweeps), with int32 or int64 indices, alternating with the case and its layout (in the
    sweeps, each rank and dtype meets both, in one layout or the other)."""
    index_dtype = INDEX_DTYPES[(i + case["last"]) % 2]
    out = [("values", index_dtype)]
    if case.get("grad") or case.get("derivatives"):
        out.append(("derivatives", index_dtype))
    if case["batched"] and case["dtype"] == "float32" and "/sweep/" in case["name"]:
        out.append(("vmap", index_dtype))
    return out


def every_part(op: str) -> list[tuple[dict, str, str]]:
    """(case, part, index dtype) of every comparison of op's cases."""
    return [(case, part, index_dtype) for i, case in enumerate(cases(op))
            for part, index_dtype in parts(case, i)]


def run(module, case: dict, part: str, index_dtype: str) -> dict[str, np.ndarray]:
    """jax_unpool's arrays of the part, by `module`'s implementation, jitted."""
    return run_parts(module, case, [(part, index_dtype)])[part, index_dtype]


def run_parts(module, case: dict, wanted: list[tuple[str, str]]
              ) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Several parts of one case in one jitted function (one compilation: the derivatives
    share the forward's)."""
    part_fn = _pool_part if case["op"] == "pool" else _unpool_part
    fns = {w: part_fn(module, case, *w) for w in wanted}
    with enable_x64(any(needs_x64(case["dtype"], d) for _, d in wanted)):
        inputs = {k: v for k, v in arrays(case).items() if k in INPUTS}
        out = jax.jit(lambda a: {w: fn(a) for w, fn in fns.items()})(inputs)
        return {w: {name: np.asarray(v) for name, v in arrays_.items()}
                for w, arrays_ in out.items()}


def key(case: dict, part: str, index_dtype: str) -> str:
    return f"{case['name']}|{part}|{index_dtype}"


def main(keys_path: str, out_path: str) -> None:
    """Runs the parts named in keys_path (a JSON list of `key`s) and saves their arrays
    (or their error) to out_path."""
    import jax_unpool as ju
    from jax_unpool import backends

    wanted = set(json.loads(Path(keys_path).read_text()))
    saved, errors = {}, {}
    by_case: dict[str, tuple[dict, list]] = {}
    for case, part, index_dtype in every_part("pool") + every_part("unpool"):
        if key(case, part, index_dtype) in wanted:
            by_case.setdefault(case["name"], (case, []))[1].append((part, index_dtype))
    for case, parts_ in by_case.values():
        try:
            results = run_parts(ju, case, parts_)
        except Exception as e:  # noqa: BLE001 -- reported to the tests of these parts
            errors.update({key(case, *w): f"{type(e).__name__}: {e}" for w in parts_})
            continue
        for w, arrays_ in results.items():
            for array, value in arrays_.items():
                # bfloat16 as its bits: npz has no bfloat16
                saved[f"{key(case, *w)}|{array}"] = value.view(np.uint16) if \
                    value.dtype == jnp.bfloat16 else value
    np.savez(out_path, errors=np.array(json.dumps(errors)),
             switch=np.array(str(backends.switch())), **saved)


if __name__ == "__main__":
    main(*sys.argv[1:])
