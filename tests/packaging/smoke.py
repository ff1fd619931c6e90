# SPDX-License-Identifier: MIT
"""The installed wheel, used as a user gets it (tests/packaging/run runs
this with a clean venv's python, from a temporary directory, with no
V05_LIB, V05CTL or PYTHONPATH):

    smoke.py CHECKOUT VERSION GLIBC_FLOOR

a plugin in this process, a reward worker in another process pushing over
shared memory, poll to the final decision, the advantages read in place
and equal to the statistics core's, `v05ctl stat` on the live segment, one
version everywhere, and a libv05/v05ctl that need nothing but glibc.
"""
import ctypes
import json
import os
import re
import subprocess
import sys


def step(msg):
    print(f"smoke: {msg}", flush=True)


def worker(name, uid, gen, samples, rewards):
    """The reward worker: another process, attached by segment name; the
    job is (uid, gen, samples), as an engine hands it out."""
    import v05
    with v05.RewardWriter.attach(name) as w:
        for s in samples:
            w.push(uid, s, rewards[s], gen=gen)
        w.flush()


def under(path, root):
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def needs_only_glibc(path, floor):
    """ldd lists only glibc's own libraries, none missing, and no symbol
    needs a glibc newer than `floor`."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True,
                         check=True).stdout
    libs = set()
    for line in out.splitlines():
        line = line.strip()
        assert "not found" not in line, (path, line)
        libs.add(line.split()[0])
    allowed = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libpthread.so.0",
               "libdl.so.2", "/lib64/ld-linux-x86-64.so.2",
               "ld-linux-x86-64.so.2"}
    assert libs <= allowed, (path, libs - allowed)
    syms = subprocess.run(["objdump", "-T", path], capture_output=True,
                          text=True, check=True).stdout
    vers = {tuple(map(int, v.split("."))) for v in
            re.findall(r"GLIBC_([0-9]+(?:\.[0-9]+)+)", syms)}
    top = max(vers)
    want = tuple(map(int, floor.split(".")))
    assert top <= want, (path, top, want)
    return sorted(libs), ".".join(map(str, top)), out


def main():
    checkout, version, floor = sys.argv[1:4]
    for var in ("V05_LIB", "V05CTL", "PYTHONPATH"):
        assert var not in os.environ, var
    import v05
    from importlib import metadata

    from v05.core import _lib
    from v05 import ctl

    # The package and its library come from the venv, not the checkout.
    pkg = os.path.dirname(v05.__file__)
    assert under(pkg, sys.prefix) and not under(pkg, checkout), pkg
    assert _lib.path_loaded == os.path.join(pkg, "libv05.so"), _lib.path_loaded
    exe = ctl.path()
    assert exe == os.path.join(sys.prefix, "bin", "v05ctl"), exe
    step(f"v05 from {pkg}, libv05 {_lib.path_loaded}, v05ctl {exe}")

    # One version: the wheel's metadata, v05.__version__, the library's
    # v05_version(), v05ctl --version, and meson's (pkg-config's) VERSION.
    ctl_ver = subprocess.run([exe, "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[-1]
    mod_ver = subprocess.run([sys.executable, "-m", "v05.ctl", "--version"],
                             capture_output=True, text=True,
                             check=True).stdout.split()[-1]
    got = {"metadata": metadata.version("v05"), "__version__": v05.__version__,
           "v05_version()": v05.version(), "v05ctl --version": ctl_ver,
           "python -m v05.ctl --version": mod_ver}
    assert set(got.values()) == {version}, (got, version)
    step(f"version {version} everywhere: {', '.join(got)}")

    man = os.path.join(sys.prefix, "share", "man", "man1", "v05ctl.1")
    with open(man) as f:
        assert f.read().startswith(".TH V05CTL 1"), man
    step(f"man page {man}")

    for path in (_lib.path_loaded, exe):
        libs, top, out = needs_only_glibc(path, floor)
        step(f"{os.path.basename(path)} needs {' '.join(libs)}; "
             f"highest symbol version GLIBC_{top} (floor {floor})")
        sys.stdout.write(out)

    # A plugin here, a reward worker in another process, to the final group.
    import multiprocessing as mp
    import numpy as np
    name = f"smoke-{os.getpid()}"
    uid, prior = "q-smoke", v05.prior_from_p(0.8)
    rewards = [1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0,
               1.0, 1.0, 1.0, 1.0]
    spawn = mp.get_context("spawn")
    with v05.Plugin.create(name, max_prompts=4) as p:
        pending = p.submit([(uid, prior)])
        final, pushed = None, 0
        while final is None:
            for d in pending:
                assert d.uid == uid and d.kind in ("sample", "final"), d
                if d.kind == "final":
                    final = d
                    break
                w = spawn.Process(target=worker,
                                  args=(name, uid, d.gen, d.samples, rewards))
                w.start()
                w.join(60)
                assert w.exitcode == 0, w.exitcode
                pushed += len(d.samples)
                step(f"worker pid {w.pid} pushed samples {d.samples}")
            if final is None:
                assert p.wait_blocking(30.0), "no decision within 30 s"
                pending = p.poll()
        g = p.group(final)
        assert g.k == pushed, (g.k, pushed)
        # Zero copy: the numpy arrays are the segment's memory, where the
        # plugin's own pointer points.
        raw = _lib.Group_()
        _lib.check(_lib.lib.v05_group(p._handle(), final.slot,
                                      ctypes.byref(raw)), "v05_group")
        assert g.advantages.ctypes.data == \
            ctypes.addressof(raw.advantages.contents)
        assert g.rewards.ctypes.data == ctypes.addressof(raw.rewards.contents)
        assert np.array_equal(g.rewards, np.float32(rewards[:g.k]))
        # The default mode, v05-eb: the batch's prior fitted on the first
        # wave (k_init = 4 rewards of this one prompt).
        got = list(map(float, g.rewards))
        want = v05.estimate(g.prior, got, mode="v05-eb",
                            fit=v05.eb_fit([(g.prior, got[:4])]))
        assert np.allclose(g.advantages, want["advantages"], atol=1e-6), \
            (g.advantages, want)
        step(f"final group k={g.k}, baseline {g.baseline:.4f}, advantages "
             f"{np.round(g.advantages, 4).tolist()} read in place")

        # v05ctl stat on the live segment, from the venv's bin/.
        st = subprocess.run([exe, "stat", "--json", name], capture_output=True,
                            text=True, check=True).stdout
        info = json.loads(st)
        step(f"v05ctl stat --json {name}: {len(st)} bytes")
        text = subprocess.run([exe, "stat", name], capture_output=True,
                              text=True, check=True).stdout
        sys.stdout.write(text)
        check_stat(info, name, pushed)
        del g
        p.release(final)
    step("ok")


def check_stat(info, name, pushed):
    """What stat read from the live segment is what this process did."""
    assert info["name"] == name, info["name"]
    assert info["owner"] == {**info["owner"], "pid": os.getpid(),
                             "alive": True}, info["owner"]
    assert info["rewards"]["applied"] == pushed, info["rewards"]
    assert info["prompts"]["submitted"] == 1, info["prompts"]
    assert info["prompts"]["final_unreleased"] == 1, info["prompts"]
    assert info["decisions"]["final"] == 1, info["decisions"]


if __name__ == "__main__":
    main()
