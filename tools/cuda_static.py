"""Static figures of the CUDA kernels, without a GPU: each kernel's registers, stack,
local memory and spills (ptxas), its theoretical occupancy at 256 threads a block, and its
SASS instructions (cuobjdump): the whole function, the grid-stride loop's body, and the
shortest path through that body -- one element's instructions on the fast path (an
interior pool window, an index in its box, an index in its plane).

    python tools/cuda_static.py [--arch 90] [--src DIR] [--json FILE] [--filter REGEX]

Compiles ffi/cuda/*_kernels.cu as CMakeLists.txt does (nvcc -O3 -lineinfo, C++17) for
one architecture. Needs nvcc and cuobjdump (the CUDA toolkit, or the pip packages
nvidia-cuda-nvcc and nvidia-cuda-cuobjdump). --src compiles another checkout's ffi/ (the
"before" of a change)."""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("max_pool_kernels.cu", "max_unpool_kernels.cu", "max_unpool_backward_kernels.cu",
           "window_offsets_kernels.cu")
# The hot kernels of issue 30's shapes (float32, int32 indices, 32-bit offsets), by their
# mangled names; before this round the pool and the tiled forward had only the general one.
HOT = {
    "pool 2x2": r"RunElementsIjNS0_15PlanePoolWindowINS0_11NativeOrderIfjEEiLi2ELi2E",
    "pool 3x3": r"RunElementsIjNS0_15PlanePoolWindowINS0_11NativeOrderIfjEEiLi3ELi3E",
    "pool": r"RunElementsIjNS0_10PoolWindowINS0_11NativeOrderIfjEEijE",
    "tiled 2x2": r"RunElementsIjNS0_17PlaneTiledScatterIjNS0_11FlatIndicesIiEELi2E",
    "tiled": r"RunElementsIjNS0_14OnePassScatterIjNS0_11FlatIndicesIiEEjLb1E",
    "windowed": r"RunElementsIjNS0_14OnePassScatterIjNS0_11FlatIndicesIiEEjLb0E",
    "gather": r"RunElementsIjNS0_6GatherIjNS0_11FlatIndicesIiEEjE",
    # The same on window offsets (issue 46): uint8 tap numbers, decoded per element.
    "pool 2x2 (w)": r"RunElementsIjNS0_15PlanePoolWindowINS0_11NativeOrderIfjEEhLi2ELi2E",
    "tiled 2x2 (w)": r"RunElementsIjNS0_17PlaneTiledScatterIjNS0_13WindowOffsetsIjEELi2E",
    "gather (w)": r"RunElementsIjNS0_6GatherIjNS0_13WindowOffsetsIjEEjE",
}
# sm_90 (H100/H200): registers per SM and their allocation unit per warp, threads per SM.
REGS_PER_SM, REG_UNIT, THREADS_PER_SM, MAX_BLOCKS = 65536, 256, 2048, 32


def tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    try:  # the pip package's copy (nvidia-cuda-cuobjdump)
        import nvidia
        for base in nvidia.__path__:
            for path in Path(base).glob(f"*/bin/{name}"):
                return str(path)
    except ImportError:
        pass
    raise SystemExit(f"{name} not found: install the CUDA toolkit or nvidia-cuda-{name}")


def compile_cubins(src: Path, arch: str, out: Path) -> tuple[list[Path], str]:
    cubins, ptxas = [], []
    for name in SOURCES:
        cubin = out / name.replace(".cu", ".cubin")
        proc = subprocess.run(
            [tool("nvcc"), "-std=c++17", "-O3", "-lineinfo", f"-arch=sm_{arch}", "-cubin",
             "-Xptxas", "-v", f"-I{src / 'ffi'}", "-o", str(cubin), str(src / "ffi/cuda" / name)],
            capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        cubins.append(cubin)
        ptxas.append(proc.stderr)
    return cubins, "\n".join(ptxas)


def spills(ptxas: str) -> dict[str, tuple[int, int, int]]:
    """Per mangled kernel: (stack frame, spill stores, spill loads) in bytes."""
    out, name = {}, None
    for line in ptxas.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(
            r"Function properties for (\w+)", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and name:
            out[name] = tuple(int(v) for v in m.groups())
    return out


def occupancy(regs: int, threads: int = 256) -> float:
    """Theoretical occupancy of a block of `threads` using `regs` registers a thread."""
    warps = threads // 32
    per_warp = math.ceil(max(regs, 1) * 32 / REG_UNIT) * REG_UNIT
    blocks = min(REGS_PER_SM // (per_warp * warps), THREADS_PER_SM // threads, MAX_BLOCKS)
    return blocks * threads / THREADS_PER_SM


def demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def sass_functions(cubin: Path) -> dict[str, list[tuple[int, str]]]:
    """Per kernel: its (address, instruction) list."""
    text = subprocess.run([tool("cuobjdump"), "-sass", str(cubin)], capture_output=True,
                          text=True, check=True).stdout
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and name:
            out[name].append((int(m.group(1), 16), m.group(2).strip()))
    return out


def loop_figures(code: list[tuple[int, str]]) -> tuple[int, int | None]:
    """The grid-stride loop's body size (head to its backward branch) and the fewest
    instructions from head to that branch. The loop is the outermost backward branch."""
    index = {addr: i for i, (addr, _) in enumerate(code)}
    back = [(i, int(m.group(1), 16)) for i, (addr, ins) in enumerate(code)
            if (m := re.search(r"\bBRA\b.*?0x([0-9a-f]+)", ins)) and int(m.group(1), 16) < addr]
    if not back:
        return len(code), None
    latch, head = max(back, key=lambda b: (b[0] - index.get(b[1], b[0]), b[0]))
    start = index[head]
    # Shortest path over the body: a DAG once the loop's own back edge is cut (inner loops:
    # their back edges are not taken -- the fast path has none).
    best = {start: 1}
    for i in range(start, latch + 1):
        if i not in best:
            continue
        ins = code[i][1]
        successors = []
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", ins)
        if "EXIT" in ins and not ins.startswith("@"):
            continue
        if m:
            target = int(m.group(1), 16)
            if target > code[i][0] and target in index:
                successors.append(index[target])
            if ins.startswith("@"):  # conditional: may fall through
                successors.append(i + 1)
        else:
            successors.append(i + 1)
        for j in successors:
            if j <= latch + 1:
                best[j] = min(best.get(j, 1 << 30), best[i] + 1)
    return latch - start + 1, best.get(latch + 1, best.get(latch))


def report(src: Path, arch: str, pattern: str | None) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        cubins, ptxas = compile_cubins(src, arch, Path(tmp))
        spill = spills(ptxas)
        rows = []
        for cubin in cubins:
            usage = subprocess.run([tool("cuobjdump"), "--dump-resource-usage", str(cubin)],
                                   capture_output=True, text=True, check=True).stdout
            sass = sass_functions(cubin)
            for name, regs, stack, local in re.findall(
                    r"Function (\S+):\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", usage):
                code = sass.get(name, [])
                body, fast = loop_figures(code)
                _frame, stores, loads = spill.get(name, (int(stack), 0, 0))
                rows.append({"kernel": name, "file": cubin.stem, "regs": int(regs),
                             "stack": int(stack), "local": int(local), "spill_stores": stores,
                             "spill_loads": loads, "occupancy": occupancy(int(regs)),
                             "sass": len(code), "loop_body": body, "fast_path": fast,
                             "offsets": 32 if re.match(r"_ZN10jax_unpool4cuda11RunElementsIj", name)
                             else 64})
    names = demangle([r["kernel"] for r in rows])
    for r in rows:
        r["name"] = names[r["kernel"]]
        r["hot"] = next((label for label, rx in HOT.items() if re.search(rx, r["kernel"])), None)
    if pattern:
        rows = [r for r in rows if re.search(pattern, r["name"]) or re.search(pattern, r["kernel"])]
    return rows


def table(rows: list[dict]) -> str:
    head = (f"{'hot':12} {'regs':>4} {'stack':>5} {'local':>5} {'spill':>5} {'occ':>5} "
            f"{'sass':>5} {'body':>5} {'fast':>5} {'off':>3}  kernel")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r["hot"] is None, r["file"], r["name"])):
        name = re.sub(r"jax_unpool::cuda::", "", r["name"])
        name = name.replace("void RunElements<", "").removesuffix("(T0, T1, unsigned int const*)")
        lines.append(f"{r['hot'] or '':12} {r['regs']:4} {r['stack']:5} {r['local']:5} "
                     f"{r['spill_stores']:5} {r['occupancy']:5.0%} {r['sass']:5} "
                     f"{r['loop_body']:5} {r['fast_path'] or '-':>5} {r['offsets']:3}  "
                     f"{name[:150]}")
    bad = [r for r in rows if r["offsets"] == 32 and (r["stack"] or r["local"] or r["spill_stores"])]
    lines.append(f"{len(rows)} kernels; with 32-bit offsets and a stack frame, local memory or "
                 f"spills: {len(bad)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="90")
    parser.add_argument("--src", type=Path, default=ROOT)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--filter")
    args = parser.parse_args(argv)
    rows = report(args.src, args.arch, args.filter)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
