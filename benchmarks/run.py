"""Runs the side-by-side benchmark (jax_unpool.cli.bench.cli); same options as
`python -m jax_unpool bench`, e.g. `python benchmarks/run.py --json results.json`."""

import sys

from jax_unpool.cli.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
