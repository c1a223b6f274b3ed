"""`python -m parex.cli ...` is the `parex` command."""

import sys

from .main import main

sys.exit(main())
