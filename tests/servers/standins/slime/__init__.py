# SPDX-License-Identifier: MIT
"""Stand-in of slime's package (tests/servers/standins/README.md)."""
