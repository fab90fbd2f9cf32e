"""The benchmark, ``python -m jax_unpool bench`` (:mod:`jax_unpool.cli.bench.cli` says what
it measures): a module per section (``unpool``, ``layout``, ``pool``, ``step``), and
``measure`` (settings, the sampler, the memory bandwidth), ``targets`` (the verdicts),
``table`` (text formatting) and ``cli`` (options, the run, the report: ``main``, ``run``).

The package itself imports nothing, so that its sections can import each other without
a circle through it."""
