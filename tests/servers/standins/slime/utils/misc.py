# SPDX-License-Identifier: MIT
"""Stand-in of slime/utils/misc.py's load_function at slime 624b824:
"pkg.module.name" -> the attribute."""
import importlib


def load_function(path):
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)
