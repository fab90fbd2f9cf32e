"""``python -m jax_unpool``: the command line, :mod:`jax_unpool.cli.main`."""

import sys

from jax_unpool.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
