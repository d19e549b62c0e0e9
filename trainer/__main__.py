"""`python -m trainer COMMAND ...` runs this package's commands alone, exactly as
`pretrain COMMAND ...` would (same handler, same recorded command): how a lower layer starts one
in a fresh process without naming the program above it."""

import sys

from pretrain.program import run_commands
from trainer import cli

sys.exit(run_commands([cli]))
