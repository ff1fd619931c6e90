# SPDX-License-Identifier: MIT
"""`python -m v05.ctl ARGS...` runs the v05ctl installed with this package
(the same as `v05ctl ARGS...` with the environment's bin/ on PATH).

The wheel installs v05ctl, a native program, as a script: into the
environment's bin/ (or ~/.local/bin for `pip install --user`). This finds
it wherever the installer put it and replaces the Python process with it.
"""
import os
import shutil
import sys
import sysconfig

__all__ = ["path", "main"]


def _candidates():
    env = os.environ.get("V05CTL")
    if env:
        yield env
    try:
        from importlib import metadata
        files = metadata.distribution("v05").files or []
    except Exception:  # no installed distribution: a source checkout
        files = []
    for f in files:
        if f.name == "v05ctl" and f.parent.name == "bin":
            yield str(f.locate())
    yield os.path.join(sysconfig.get_path("scripts"), "v05ctl")
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", "build", "tools", "v05ctl", "v05ctl")
    found = shutil.which("v05ctl")
    if found:
        yield found


def path() -> str:
    """The v05ctl program of this installation (FileNotFoundError if none)."""
    tried = []
    for p in _candidates():
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.abspath(p)
        tried.append(p)
    raise FileNotFoundError("v05ctl not found; tried: " + ", ".join(tried))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    exe = path()
    sys.stdout.flush()
    os.execv(exe, [exe] + argv)


if __name__ == "__main__":
    main()
