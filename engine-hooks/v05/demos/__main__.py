# SPDX-License-Identifier: MIT
"""python3 -m v05.demos: the demo (scripts/demo runs it)."""

import sys

from .demo import main

sys.exit(main())
