"""The command line (``python -m jax_unpool``) and what it runs, kept apart from the ops:
``main`` (argument parsing, ``info``), ``demo`` (a small SegNet trained on generated
images), ``bench`` (the side-by-side benchmarks, a package with a module per section)."""
