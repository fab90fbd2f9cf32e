"""The CPU kernels of a release wheel (C++ by zig's clang, tools/build-wheels) against those
of a source build (usually GCC), case by case, in one run.

    python benchmarks/wheel_vs_source.py --wheel dist/jax_unpool-...-cp311-...whl
    python benchmarks/wheel_vs_source.py --wheel-python /path/to/venv/bin/python \\
        --ops unpool_forward --dtypes float32 --instructions

The source build is the jax_unpool that --source-python imports (default: this Python's,
e.g. after `pip install .`); the wheel's is a venv's: --wheel installs the file into
build/wheel-vs-source/<wheel> (a venv beside this Python's packages, `pip install
--no-index --no-deps`), --wheel-python names one where it is installed. Both run in child
processes outside the checkout, so the source tree shadows neither.

A case is an op (the unpool forward and backward, the pool with indices), a spatial rank,
a layout, a value dtype and an index dtype: every combination of the options, all by
default. Indices are a 2-per-axis, stride-2 pool's; the pool pools by 2, stride 2.

- Times (default): one child per build, kept for the whole run. Per case, --rounds rounds
  in which each child times --calls calls, the two in turn (the order alternating), so
  that load from elsewhere on the machine hits both alike; a build's time is the median
  over the rounds of each round's median. glibc is pinned to reuse freed pages, as in
  benchmarks/pool_per_byte.py.
- --instructions: the instructions each build executes per call, counted by valgrind's
  callgrind (a run of a few minutes at --batch 1): those of the module _jax_unpool, and
  those of what it calls in other libraries (memset, mostly: glibc's `rep stosb` counts
  one per iteration). Instruction counts do not move with load: on a shared machine they
  tell a kernel's code apart where times vary by 2x.

Either way each case's results are hashed in both builds: a case whose bits differ is
flagged (the builds must agree bit for bit). Ratios are wheel / source: above 1, the
wheel is slower. A benchmark, not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPS = ("unpool_forward", "unpool_backward", "pool")
DTYPES = ("float32", "bfloat16", "int8", "float64")
INDEX_DTYPES = ("int32", "int64")
LAYOUTS = ("first", "last")
FORMATS = {(1, "first"): "NCW", (1, "last"): "NWC", (2, "first"): "NCHW",
           (2, "last"): "NHWC", (3, "first"): "NCDHW", (3, "last"): "NDHWC"}
# Pooled (unpool input) shapes without the batch, channels first: 2**18 elements each.
SHAPES = {1: (64, 4096), 2: (64, 64, 64), 3: (64, 16, 16, 16)}
PINNED = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
MODULE = re.compile(r"/_jax_unpool\.[^/]*\.so$")  # the CPU module, not _jax_unpool_cuda


# --------------------------------------------------------------------------------------
# in a child: one build's calls
# --------------------------------------------------------------------------------------

def prepare(case: dict):
    """The jitted call of `case` and its arguments, on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jax_unpool as ju

    k, fmt = case["rank"], FORMATS[case["rank"], case["layout"]]
    pooled = tuple(case["shape"])  # channels first
    full = pooled[:2] + tuple(2 * d for d in pooled[2:])
    rng = np.random.default_rng(0)

    dtype = jnp.dtype(case["dtype"])

    def values(shape):
        if dtype == np.int8:
            return rng.integers(-128, 128, size=shape, dtype=np.int8)
        return rng.standard_normal(shape).astype(dtype)

    def layout(a):
        return np.moveaxis(a, 1, -1) if case["layout"] == "last" else a

    # One flat position per window of a 2-per-axis, stride-2 pool of a `full` input.
    flat = np.zeros(pooled, np.int64)
    for a, d in enumerate(pooled[2:]):
        view = [1] * len(pooled)
        view[2 + a] = d
        coord = np.arange(d).reshape(view) * 2 + rng.integers(0, 2, size=pooled)
        flat = flat + coord * math.prod(full[3 + a:])
    indices = layout(flat.astype(case["index_dtype"]))
    if case["op"] == "unpool_forward":
        unpool = getattr(ju, f"max_unpool{k}d")
        f = jax.jit(lambda x, i: unpool(x, i, 2, data_format=fmt))
        args = (layout(values(pooled)), indices)
    elif case["op"] == "unpool_backward":
        backward = getattr(ju, f"max_unpool{k}d_backward")
        x = jax.ShapeDtypeStruct(indices.shape, dtype)
        f = jax.jit(lambda g, i: backward(g, x, i, full[2:], data_format=fmt))
        args = (layout(values(full)), indices)
    else:
        pool = getattr(ju, f"max_pool{k}d_with_indices")
        f = jax.jit(lambda x: pool(x, 2, 2, data_format=fmt, index_dtype=case["index_dtype"]))
        args = (layout(values(full)),)
    return f, [jax.device_put(a) for a in args]


def digest(results) -> str:
    import jax
    import numpy as np

    h = hashlib.sha256()
    for r in jax.tree_util.tree_leaves(results):
        h.update(np.asarray(r).tobytes())
    return h.hexdigest()[:16]


def child_times() -> None:
    """Serves requests on stdin, a JSON line each: {"case": ..., "calls": n} -> the
    seconds of n calls and the results' hash."""
    import jax

    jax.config.update("jax_enable_x64", True)  # int64 indices
    import jax_unpool

    print(json.dumps({"module": jax_unpool._jax_unpool.__file__}), flush=True)
    current, f, args, hashed = None, None, None, None
    for line in sys.stdin:
        request = json.loads(line)
        if request["case"] != current:
            current = request["case"]
            f, args = prepare(current)
            hashed = digest(jax.block_until_ready(f(*args)))
        time.sleep(0.01)  # XLA's idle workers spin a while: let the other child's stop
        seconds = []
        for _ in range(request["calls"]):
            start = time.perf_counter()
            jax.block_until_ready(f(*args))
            seconds.append(time.perf_counter() - start)
        print(json.dumps({"seconds": seconds, "digest": hashed}), flush=True)


def child_instructions(cases: list[dict], calls: int) -> None:
    """Under callgrind (--dump-before=getppid): each case prepared and called once, then
    `calls` calls between two os.getppid(), which make callgrind dump its counts."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax_unpool

    hashes = []
    for case in cases:
        f, args = prepare(case)
        hashes.append(digest(jax.block_until_ready(f(*args))))
        os.getppid()
        for _ in range(calls):
            jax.block_until_ready(f(*args))
        os.getppid()
    print(json.dumps({"module": jax_unpool._jax_unpool.__file__, "digests": hashes}))


# --------------------------------------------------------------------------------------
# in the parent
# --------------------------------------------------------------------------------------

def child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return dict(env, JAX_PLATFORMS="cpu", **PINNED)


def wheel_python(wheel: Path, source_python: str) -> str:
    """A venv beside `source_python`'s packages with `wheel` installed (again)."""
    venv = REPO / "build" / "wheel-vs-source" / wheel.name.removesuffix(".whl")
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([source_python, "-m", "venv", "--system-site-packages", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-index", "--no-deps", "--force-reinstall", wheel], check=True)
    return str(python)


def time_cases(pythons: dict[str, str], cases: list[dict], rounds: int, calls: int) -> dict:
    """Each case's median milliseconds per call in each build, and its results' hash."""
    with tempfile.TemporaryDirectory() as away:
        children = {name: subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--child"], cwd=away, env=child_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for name, python in pythons.items()}
        try:
            modules = {name: json.loads(c.stdout.readline())["module"]
                       for name, c in children.items()}
            results = []
            for n, case in enumerate(cases):
                medians = {name: [] for name in pythons}
                hashes = {}
                for r in range(rounds):
                    names = list(pythons) if r % 2 == 0 else list(pythons)[::-1]
                    for name in names:
                        children[name].stdin.write(json.dumps({"case": case, "calls": calls})
                                                   + "\n")
                        children[name].stdin.flush()
                        reply = json.loads(children[name].stdout.readline())
                        medians[name].append(statistics.median(reply["seconds"]) * 1e3)
                        hashes[name] = reply["digest"]
                results.append({**case, "ms": {k: statistics.median(v)
                                               for k, v in medians.items()},
                                "digest": hashes})
                print(f"  [{n + 1}/{len(cases)}] {label(case)}", file=sys.stderr, flush=True)
        finally:
            for c in children.values():
                c.stdin.close()
                c.wait()
    return {"modules": modules, "cases": results}


def module_instructions(path: str) -> tuple[int, int]:
    """From a callgrind dump: the instructions run in the module's own code, and those
    run in what it calls in other objects (inclusive)."""
    names: dict[str, str] = {}

    def name(value: str) -> str:  # "(id) name" defines an id; "(id)" uses it
        found = re.match(r"\((\d+)\)(?: (.*))?", value)
        if not found:
            return value
        if found.group(2) is not None:
            names[found.group(1)] = found.group(2)
        return names.get(found.group(1), "")

    own = called = 0
    ob, cob, in_call = "", None, False
    with open(path) as dump:
        for line in dump:
            if line.startswith("ob="):
                ob = name(line[3:].strip())
            elif line.startswith("cob="):
                cob = name(line[4:].strip())
            elif line.startswith("calls="):
                in_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                cost = sum(int(t) for t in line.split()[1:])
                mine = MODULE.search(ob) is not None
                if in_call:  # the inclusive cost of the call just named
                    if mine and not MODULE.search(cob if cob is not None else ob):
                        called += cost
                    in_call, cob = False, None
                elif mine:
                    own += cost
    return own, called


def count_cases(pythons: dict[str, str], cases: list[dict], calls: int) -> dict:
    """Each case's instructions per call in each build (callgrind, the builds in
    parallel), and its results' hash."""
    with tempfile.TemporaryDirectory() as away:
        runs = {}
        for name, python in pythons.items():
            out = Path(away) / name
            out.mkdir()
            runs[name] = (out, subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--dump-before=getppid",
                 f"--callgrind-out-file={out}/cg.%p", python, str(Path(__file__).resolve()),
                 "--child-instructions", json.dumps(cases), "--calls", str(calls)],
                cwd=away, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        counts, modules, hashes = {}, {}, {}
        for name, (out, run) in runs.items():
            stdout, stderr = run.communicate()
            if run.returncode != 0:
                sys.exit(f"wheel_vs_source: the {name} build under valgrind failed:\n{stderr}")
            reply = json.loads(stdout.strip().splitlines()[-1])
            modules[name], hashes[name] = reply["module"], reply["digests"]
            dumps = sorted(glob.glob(f"{out}/cg.*.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
            if len(dumps) != 2 * len(cases):
                sys.exit(f"wheel_vs_source: {len(dumps)} callgrind dumps for {len(cases)} "
                         "cases: something else called getppid")
            # Dump 2k + 1 ends at case k's first marker, 2k + 2 holds its calls.
            counts[name] = [module_instructions(d) for d in dumps[1::2]]
    results = [{**case, "instructions": {name: counts[name][n][0] / calls for name in pythons},
                "called": {name: counts[name][n][1] / calls for name in pythons},
                "digest": {name: hashes[name][n] for name in pythons}}
               for n, case in enumerate(cases)]
    return {"modules": modules, "cases": results}


def label(case: dict) -> str:
    return (f"{case['op']} {case['rank']}-D {FORMATS[case['rank'], case['layout']]} "
            f"{case['dtype']} {case['index_dtype']}")


def table(run: dict, field: str, unit: str) -> str:
    lines = [f"| case | source {unit} | wheel {unit} | wheel / source | bits |",
             "|---|---|---|---|---|"]
    for c in run["cases"]:
        source, wheel = c[field]["source"], c[field]["wheel"]
        same = "same" if c["digest"]["source"] == c["digest"]["wheel"] else "DIFFERENT"
        fmt = "{:.3f}" if field == "ms" else "{:,.0f}"
        lines.append(f"| {label(c)} | {fmt.format(source)} | {fmt.format(wheel)} "
                     f"| {wheel / source:.3f} | {same} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    wheel = parser.add_mutually_exclusive_group()
    wheel.add_argument("--wheel", type=Path, help="a wheel file, installed into a venv")
    wheel.add_argument("--wheel-python", help="a Python where the wheel is installed")
    parser.add_argument("--source-python", default=sys.executable,
                        help="a Python where the source build is installed (default: this)")
    parser.add_argument("--ops", nargs="+", choices=OPS, default=OPS)
    parser.add_argument("--ranks", nargs="+", type=int, choices=(1, 2, 3), default=(1, 2, 3))
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=LAYOUTS)
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=DTYPES)
    parser.add_argument("--index-dtypes", nargs="+", choices=INDEX_DTYPES, default=INDEX_DTYPES)
    parser.add_argument("--batch", type=int, default=None,
                        help="N of every shape (default 8; 1 with --instructions): the "
                             "unpool's input is N x 2**18 elements")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of times (default 5)")
    parser.add_argument("--calls", type=int, default=None,
                        help="calls per round (default 7; 3 with --instructions)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions with callgrind instead of timing")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-instructions", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    calls = args.calls or (3 if args.instructions else 7)
    if args.child:
        child_times()
        return 0
    if args.child_instructions:
        child_instructions(json.loads(args.child_instructions), calls)
        return 0
    if not (args.wheel or args.wheel_python):
        parser.error("one of --wheel or --wheel-python is needed")
    if args.rounds < 1 or calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    batch = args.batch or (1 if args.instructions else 8)
    pythons = {"source": args.source_python,
               "wheel": args.wheel_python or wheel_python(args.wheel.resolve(),
                                                          args.source_python)}
    cases = [{"op": op, "rank": k, "layout": layout, "dtype": dtype, "index_dtype": index,
              "shape": [batch, *SHAPES[k]]}
             for op, k, layout, dtype, index in itertools.product(
                 args.ops, args.ranks, args.layouts, args.dtypes, args.index_dtypes)]
    if args.instructions:
        run = count_cases(pythons, cases, calls)
        print(table(run, "instructions", "Ir/call"))
    else:
        run = time_cases(pythons, cases, args.rounds, calls)
        print(table(run, "ms", "ms"))
    for name, module in run["modules"].items():
        print(f"{name}: {module}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(run, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
