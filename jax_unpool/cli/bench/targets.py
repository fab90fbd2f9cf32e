"""The targets of the performance issues: each section's values, judged against their
thresholds only when every median came from enough samples.

A median of two samples on a shared machine says little: ``--quick`` (2 samples) checks
that the benchmark runs, not how fast anything is, so its targets read "too few samples
to judge" rather than "MISSED" or "holds".
"""

from __future__ import annotations

from types import ModuleType

# The fewest samples per median whose ratios the run judges (CONTRIBUTING's committed
# runs take 5; the default is 7).
SAMPLES_TO_JUDGE = 5
VERDICTS = {True: "holds", False: "MISSED", None: "not measured"}
TOO_FEW = "too few samples to judge"


def summarize(sections: list[ModuleType], rows: list[dict], reps: int) -> dict[str, dict]:
    """Every target of `sections`: its value (None: not measured), the threshold, whether it
    holds (None: not measured, or not judged) and the verdict in words."""
    summary = {}
    for section in sections:
        found = section.targets(rows)
        for name, (cmp, threshold) in section.TARGETS.items():
            value = found[name]
            holds = None
            if value is not None and reps >= SAMPLES_TO_JUDGE:
                holds = value >= threshold if cmp == ">=" else value <= threshold
            verdict = TOO_FEW if value is not None and reps < SAMPLES_TO_JUDGE else VERDICTS[holds]
            summary[name] = {"value": value, "target": f"{cmp} {threshold}", "holds": holds,
                             "verdict": verdict}
    return summary


def report(summary: dict[str, dict], reps: int) -> list[str]:
    judged = reps >= SAMPLES_TO_JUDGE
    lines = [("targets (float32 values, int32 indices; median over the large 2-D shapes; "
              "pool_per_byte_*: 1-D and 3-D over the rank shapes)")]
    if not judged:
        lines.append(f"  (medians of {reps} samples: too few to judge a target, "
                     f"{SAMPLES_TO_JUDGE} or more are needed; --reps sets them)")
    for name, t in summary.items():
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        lines.append(f"  {name:<32}{value:>8}  (target {t['target']}): {t['verdict']}")
    return lines
