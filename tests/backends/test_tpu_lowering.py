"""What a TPU runs: SegNet train steps lowered for TPU (no TPU needed) hold no scatter and
no gather outside the branches of a conditional, and export for TPU.

XLA runs scatter as a serial loop on TPUs (openxla/xla#12982); the dense lowering keeps
XLA's scatter and gather only for indices outside their windows, in the other branch of
an on-device conditional (notes: xla-ops-and-wheels.md)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

import jax_unpool as ju

POOLS = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
         3: ju.max_pool3d_with_indices}
UNPOOLS = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
SPATIAL = {1: (16,), 2: (8, 10), 3: (4, 6, 8)}
WINDOWS = {"2x2/s2": (2, 2, 0), "3x3/s2/p1": (3, 2, 1)}
# Where an instruction names the computations it runs: a conditional's branches run only
# when taken; every other reference (to_apply, calls, body, condition) runs with its caller.
_BRANCHES = re.compile(r"(?:branch_computations=\{([^}]*)\}|true_computation=([\w.\-]+)|"
                       r"false_computation=([\w.\-]+))")
_CALLS = re.compile(r"(?:to_apply|calls|body|condition)=([\w.\-]+)")
_OP = re.compile(r"=\s*\S+\s+(scatter|gather)\(")


def computations(hlo: str) -> tuple[str, dict[str, list[str]]]:
    """HLO text -> (the entry computation's name, each computation's instruction lines)."""
    comps, entry, name = {}, None, None
    for line in hlo.splitlines():
        header = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header:
            name = header.group(2)
            comps[name] = []
            entry = name if header.group(1) else entry
        elif name and line.startswith(" "):
            comps[name].append(line)
    return entry, comps


def count_ops(hlo: str) -> tuple[dict[str, int], dict[str, int]]:
    """Scatters and gathers in the computations that always run (the entry and what it
    calls, outside conditional branches), and in those that run only in a branch."""
    entry, comps = computations(hlo)
    always, branch = set(), set()

    def visit(name, in_branch):
        seen = branch if in_branch else always
        if name in seen:
            return
        seen.add(name)
        for line in comps[name]:
            for callee in _CALLS.findall(line):
                visit(callee, in_branch)
            for groups in _BRANCHES.findall(line):
                for callee in re.split(r"[,\s]+", " ".join(groups).strip()):
                    if callee:
                        visit(callee.lstrip("%"), True)
    visit(entry, False)

    def ops(names):
        found = [m for n in names for line in comps[n] for m in _OP.findall(line)]
        return {op: found.count(op) for op in ("scatter", "gather")}
    return ops(always), ops(branch - always)


def segnet_step(k: int, fmt: str, window: tuple[int, int, int]):
    """value_and_grad of pool -> unpool -> loss, the pool's input size given back."""
    kernel, stride, padding = window

    def loss(x):
        v, i = POOLS[k](x, kernel, stride, padding, data_format=fmt)
        size = x.shape[2:] if fmt[1] == "C" else x.shape[1:-1]
        y = UNPOOLS[k](jnp.tanh(v), i, kernel, stride, padding, output_size=size,
                       data_format=fmt)
        return jnp.sum((y - x) ** 2)
    return jax.value_and_grad(loss)


def operand(k: int, fmt: str) -> jax.ShapeDtypeStruct:
    shape = (2, 3, *SPATIAL[k]) if fmt[1] == "C" else (2, *SPATIAL[k], 3)
    return jax.ShapeDtypeStruct(shape, jnp.float32)


CASES = [(k, fmt, w) for k in (1, 2, 3) for fmt in FORMATS[k] for w in WINDOWS]


@pytest.mark.parametrize("k,fmt,window", CASES)
def test_segnet_step_for_tpu_has_no_scatter_or_gather_outside_conditionals(k, fmt, window):
    step = segnet_step(k, fmt, WINDOWS[window])
    hlo = jax.jit(step).trace(operand(k, fmt)).lower(lowering_platforms=("tpu",)).as_text(
        dialect="hlo")
    always, in_branches = count_ops(hlo)
    assert always == {"scatter": 0, "gather": 0}
    # The general path is there, for indices outside their windows: the unpool forward's
    # scatter and its backward's gather (the pool's own gradient needs none).
    assert in_branches["scatter"] >= 1 and in_branches["gather"] >= 1


@pytest.mark.parametrize("k,fmt,window", CASES[::3])
def test_segnet_step_exports_for_tpu(k, fmt, window):
    exported = jax.export.export(jax.jit(segnet_step(k, fmt, WINDOWS[window])),
                                 platforms=["tpu"])(operand(k, fmt))
    assert exported.platforms == ("tpu",)
    text = exported.mlir_module()
    assert "custom_call @jax_unpool" not in text
    assert "stablehlo.case" in text or "stablehlo.if" in text


def test_hlo_counting_sees_scatter_outside_conditionals():
    # The counter itself: the path for an unknown window (output sizes no multiple of the
    # input's) is a scatter (of positions) and a gather (of their values) that always run.
    def f(x, i):
        return ju.max_unpool2d(x, i, output_size=(5, 7))
    args = (jax.ShapeDtypeStruct((1, 2, 2, 3), jnp.float32),
            jax.ShapeDtypeStruct((1, 2, 2, 3), jnp.int32))
    hlo = jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    always, in_branches = count_ops(hlo)
    assert always == {"scatter": 1, "gather": 1}
    assert in_branches == {"scatter": 0, "gather": 0}


def window_segnet_step(k: int, fmt: str, window: tuple[int, int, int]):
    """segnet_step with window offsets: the unpool takes its window from them."""
    kernel, stride, padding = window

    def loss(x):
        v, w = POOLS[k](x, kernel, stride, padding, data_format=fmt, index_format="window")
        return jnp.sum((UNPOOLS[k](jnp.tanh(v), w) - x) ** 2)
    return jax.value_and_grad(loss)


# Instructions a TPU runs slowly or serially: scatter and gather, integer division and
# remainder (the flat index's decoding), and a conditional's branches.
_SLOW = re.compile(r"=\s*(\S+)\s+(scatter|gather|divide|remainder|conditional)\(")


@pytest.mark.parametrize("k,fmt,window", CASES)
def test_a_window_offsets_step_for_tpu_has_no_scatter_gather_division_or_conditional(
        k, fmt, window):
    step = window_segnet_step(k, fmt, WINDOWS[window])
    hlo = jax.jit(step).trace(operand(k, fmt)).lower(lowering_platforms=("tpu",)).as_text(
        dialect="hlo")
    found = [(op, shape) for shape, op in _SLOW.findall(hlo)
             if op in ("scatter", "gather", "conditional") or not shape.startswith("f")]
    assert found == []
    assert "u8[" in hlo  # the offsets themselves, not flat indices made from them


def test_the_slow_instruction_pattern_sees_the_flat_steps_division():
    # The pattern itself: the flat format's step decodes its indices (divide/remainder on
    # integers, or a conditional with the general path).
    hlo = jax.jit(segnet_step(2, "NCHW", WINDOWS["3x3/s2/p1"])).trace(
        operand(2, "NCHW")).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    assert {op for _, op in _SLOW.findall(hlo)} & {"divide", "remainder", "conditional"}
