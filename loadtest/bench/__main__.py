"""python -m loadtest.bench (see loadtest/bench/cli.py)."""

import sys

from loadtest.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
