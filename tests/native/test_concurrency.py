"""Concurrency: many Python threads calling the ops at once each get their own answer.

The CPU handlers keep no global mutable state: every call's scratch (the chunk queue, the
per-chunk first bad index) lives in a per-call object, so concurrent calls -- of different
executables or of the same one -- cannot see each other's data or errors. Threads start
together (a barrier) and repeat their call, so calls overlap, including calls that split
their planes across the XLA thread pool and calls that fail.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle
from dtypes import bits
from out_of_range import RUNTIME_ERRORS, expected_message

import jax_unpool as ju

THREADS, REPEATS = 8, 10

forward = jax.jit(ju.max_unpool2d, static_argnames=("output_size", "data_format"))
backward = jax.jit(ju.max_unpool2d_backward, static_argnames=("output_size", "data_format"))


@dataclass
class Job:
    call: Callable[[], jax.Array]
    want: np.ndarray | None = None   # the answer, or
    error: str | None = None         # the error message


def run_together(jobs: list[Job]) -> None:
    """Runs every job REPEATS times in its own thread, all starting at once; raises the
    first wrong answer or unexpected exception, naming the job."""
    barrier = threading.Barrier(len(jobs))
    failures: list[str] = []

    def work(k: int, job: Job) -> None:
        barrier.wait()
        for _ in range(REPEATS):
            try:
                got = np.asarray(job.call())
            except RUNTIME_ERRORS as e:
                if str(e) != job.error:
                    failures.append(f"job {k}: error {e!s}, expected {job.error or 'none'}")
                continue
            if job.want is None or got.shape != job.want.shape or not np.array_equal(
                    bits(got), bits(job.want)):
                failures.append(f"job {k}: wrong answer (expected error {job.error})")

    threads = [threading.Thread(target=work, args=(k, job)) for k, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not failures, failures[:5]


def layout(n, c, h, w, last):
    return (n, h, w, c) if last else (n, c, h, w)


def unique_case(rng, n, c, h, w, last, dtype=np.float32):
    """Pooling indices (unique per plane) and the scattered result, by numpy put."""
    shape = layout(n, c, h, w, last)
    idx, hw = numpy_oracle.pool_indices(rng, shape, 2, last)
    x = rng.standard_normal(shape).astype(dtype)
    to_planes = (lambda a: np.moveaxis(a, -1, 1)) if last else (lambda a: a)
    out = np.zeros((n, c, hw[0] * hw[1]), x.dtype)
    np.put_along_axis(out, to_planes(idx).reshape(n, c, -1), to_planes(x).reshape(n, c, -1), -1)
    out = out.reshape(n, c, *hw)
    return x, idx, hw, (np.moveaxis(out, 1, -1) if last else out)


def with_bad_index(rng, idx, value):
    bad = idx.copy().reshape(-1)
    bad[rng.integers(0, bad.size)] = value
    return bad.reshape(idx.shape)


def mixed_jobs(rng) -> list[Job]:
    """Different shapes, dtypes, layouts and ops; big ones take the thread-pool path
    (several MB per call), four fail with their own bad index."""
    jobs = []
    for k in range(THREADS):
        last = bool(k % 2)
        fmt = "NHWC" if last else "NCHW"
        big = k % 4 < 2
        n, c, h, w = (2, 8 + k, 128, 96) if big else (1 + k % 3, 3, 5, 4)
        x, idx, hw, out = unique_case(rng, n, c, h, w, last,
                                      [np.float32, np.float16, np.int8, np.uint32][k % 4])
        if k % 4 == 3:  # small, duplicated indices: the sequential oracle decides
            idx = rng.integers(0, 3, idx.shape).astype(np.int32)
            out = numpy_oracle.unpool(x, idx, hw, last)
        if k < 4:
            jobs.append(Job(lambda x=x, i=idx, hw=hw, f=fmt: forward(
                x, i, output_size=hw, data_format=f), want=out))
            jobs.append(Job(lambda o=out, x=x, i=idx, hw=hw, f=fmt: backward(
                o, x, i, output_size=hw, data_format=f),
                want=numpy_oracle.gather(out, idx, last) if k == 3 else x))
        else:  # errors, each with its own value and position
            bad = with_bad_index(rng, idx, [-7, 10**6 + k, hw[0] * hw[1], -1][k % 4])
            jobs.append(Job(lambda x=x, i=bad, hw=hw, f=fmt: forward(
                x, i, output_size=hw, data_format=f),
                error=expected_message("max_unpool2d", bad, hw, last)))
            jobs.append(Job(lambda o=out, x=x, i=bad, hw=hw, f=fmt: backward(
                o, x, i, output_size=hw, data_format=f),
                error=expected_message("max_unpool2d_backward", bad, hw, last)))
    return jobs


def test_threads_calling_different_executables_get_their_own_answers(rng):
    run_together(mixed_jobs(rng))


def test_threads_sharing_one_executable_get_their_own_answers_and_errors(rng):
    # Same shapes, so every thread runs the same compiled executable with its own data;
    # half of them with a bad index at a position of their own.
    jobs = []
    for k in range(THREADS):
        x, idx, hw, out = unique_case(rng, 2, 16, 96, 96, False)  # ~7 MB: thread pool
        if k % 2:
            bad = with_bad_index(rng, idx, -1 - k)
            jobs.append(Job(lambda x=x, i=bad, hw=hw: forward(x, i, output_size=hw),
                            error=expected_message("max_unpool2d", bad, hw, False)))
        else:
            jobs.append(Job(lambda x=x, i=idx, hw=hw: forward(x, i, output_size=hw), want=out))
    run_together(jobs)


def test_threads_differentiating_at_once_get_their_own_gradients(rng):
    # jax.grad of <max_unpool2d(x), g> w.r.t. x is the gather of g at the indices.
    @jax.jit
    def grad_x(x, idx, g):
        return jax.grad(lambda x: jnp.vdot(ju.max_unpool2d(x, idx, output_size=(96, 96)), g))(x)

    jobs = []
    for _ in range(THREADS):
        x, idx, hw, _ = unique_case(rng, 2, 6, 48, 48, False)
        g = rng.standard_normal((2, 6, *hw)).astype(np.float32)
        jobs.append(Job(lambda x=x, i=idx, g=g: grad_x(x, i, g),
                        want=numpy_oracle.gather(g, idx)))
    run_together(jobs)
