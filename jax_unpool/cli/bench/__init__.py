"""The benchmark, ``python -m jax_unpool bench`` (:mod:`jax_unpool.cli.bench.cli` says what
it measures): a module per section (``unpool``, ``layout``, ``pool``, ``step``), and
``measure`` (settings, the sampler, the memory bandwidth), ``targets`` (the verdicts),
``table`` (text formatting) and ``cli`` (options, the run, the report)."""

from jax_unpool.cli.bench.cli import main, run

__all__ = ["main", "run"]
