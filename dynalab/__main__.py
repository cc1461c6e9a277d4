"""`python -m dynalab`: the same command line as the `dynalab` console script."""

import sys

from dynalab.cli import main

sys.exit(main())
