"""`python3 -m hostside.preflight`: the preflight's runner (runner.py)."""

import sys

from .runner import main

sys.exit(main())
