# SPDX-License-Identifier: MIT
"""Packaging in the source tree: one version, pinned build requirements
that agree, and the library lookup order of v05/_lib.py. The installed
wheel itself is tested by tests/packaging/run (scripts/test part 5)."""
import os
import re
import subprocess
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

import pytest

import v05

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def meson_version():
    with open(os.path.join(ROOT, "meson.build")) as f:
        return re.search(r"^  version: '([0-9.]+)',$", f.read(), re.M)[1]


def test_one_version(v05ctl):
    want = meson_version()
    out = subprocess.run([v05ctl, "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out == f"v05ctl {want}\n"
    assert v05.version() == want
    assert v05.__version__ == want
    # Nothing else in the tree spells a version out.
    if tomllib:
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            proj = tomllib.load(f)["project"]
        assert "version" not in proj and proj["dynamic"] == ["version"]


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_build_requirements_pinned_alike():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    with open(os.path.join(ROOT, "requirements", "build.txt")) as f:
        pins = {line.split("#")[0].strip() for line in f} - {""}
    for r in requires:
        assert "==" in r, f"{r} is not pinned"
        assert r in pins, f"{r} differs from requirements/build.txt"
    assert all("==" in p for p in pins), pins


def _import_with(env_lib, tmp_path):
    """Import v05 in a fresh interpreter with V05_LIB=env_lib."""
    env = dict(os.environ, V05_LIB=env_lib,
               PYTHONPATH=os.path.join(ROOT, "engine-hooks"))
    return subprocess.run(
        [sys.executable, "-c",
         "import v05, v05.core._lib as l; print(l.path_loaded)"],
        capture_output=True, text=True, env=env, cwd=tmp_path)


def test_v05_lib_wins_and_a_bad_one_is_not_skipped(tmp_path):
    lib = os.environ["V05_LIB"]
    r = _import_with(lib, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == lib, r.stderr
    # A set V05_LIB that cannot load is reported, not silently replaced by
    # the checkout's build/libv05.so.
    bad = str(tmp_path / "nowhere" / "libv05.so")
    r = _import_with(bad, tmp_path)
    assert r.returncode != 0
    assert "libv05.so not found" in r.stderr and bad in r.stderr
    assert "build/libv05.so" not in r.stderr.split("Tried:")[1]
