"""The command line (``python -m jax_unpool``) and what it runs, kept apart from the ops:
``main`` (argument parsing, ``info``), ``demo`` (a small SegNet trained on generated
images), ``bench`` and ``bench_step`` (the side-by-side benchmarks)."""
