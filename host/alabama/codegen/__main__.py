"""`python -m alabama.codegen [--check]`: the same as `alabama codegen`."""
import sys

from alabama.cli import main

sys.exit(main(["codegen"] + sys.argv[1:]))
