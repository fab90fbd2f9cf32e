"""Formatting the rows as text: numbers, and the table of an op against XLA and torch that
the unpool and pool sections share. A ratio measured from too few samples to judge is
flagged with a "?"."""

from __future__ import annotations

from collections.abc import Callable, Sequence

DTYPE = 15  # the dtype column's width: the longest name, float8_e4m3fnuz, and a space


def name(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def number(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def ms(v: float | None) -> str:
    return number(v, ".4f" if v is not None and v < 0.1 else ".2f")  # tiny shapes: 0.1 us


def gb(v: float | None) -> str:
    return number(v, ".1f")


def ratio(v: float | None, judged: bool) -> str:
    """A ratio, flagged "?" when its samples were too few to judge it."""
    return number(v) + ("" if judged or v is None else "?")


def op_table(rows: list[dict], first: str, judged: bool,
             label: Callable[[dict], str] = lambda r: r["op"]) -> list[str]:
    head = (f"{'op':<19}{first:<20}{'dtype':<{DTYPE}}{'index':<7}{'ours':>9}{'xla':>9}"
            f"{'torch':>9}{'roof':>9}{'xla/ours':>9}{'torch/ours':>11}{'GB/s':>7}"
            f"{'xla':>7}{'torch':>7}{'of bw':>7}{'sys':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{label(r):<19}{name(r['shape']):<20}{r['dtype']:<{DTYPE}}"
            f"{r['index_dtype']:<7}{ms(r['jax_unpool_ms']):>9}{ms(r['xla_ms']):>9}"
            f"{ms(r['torch_ms']):>9}{ms(r['roofline_ms']):>9}"
            f"{ratio(r['speedup_vs_xla'], judged):>9}"
            f"{ratio(r['speedup_vs_torch'], judged):>11}"
            f"{gb(r['jax_unpool_gbps']):>7}{gb(r['xla_gbps']):>7}{gb(r['torch_gbps']):>7}"
            f"{ratio(r['bandwidth_fraction'], judged):>7}{ms(r.get('jax_unpool_sys_ms')):>8}")
    return lines
