"""The command line (``python -m jax_unpool``) and what it runs, kept apart from the ops:
``main`` (argument parsing, ``info``), ``options`` (what the commands check before any
work: option values, output files, the machine's memory), ``demo`` (a small SegNet
trained on generated images) and ``picture`` (its PNG), ``bench`` (the side-by-side
benchmarks, a package with a module per section)."""
