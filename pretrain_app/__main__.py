"""`python -m pretrain_app ARGS...` is `pretrain ARGS...`."""

import sys

from pretrain_app.cli import main

sys.exit(main())
