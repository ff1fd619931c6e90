# SPDX-License-Identifier: MIT
"""The core binding: the library loader, the plugin, reward writers and
readers, the observer, metrics and priors. Imports nothing of v05 above it."""
