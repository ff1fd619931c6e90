# SPDX-License-Identifier: MIT
"""Every v05ctl command documents itself, and the generated man page
carries every command's whole --help text."""
import os
import re
import subprocess


def test_every_command_has_help_and_man_section(v05ctl):
    top = subprocess.run([v05ctl, "--help"], capture_output=True, text=True,
                         check=True).stdout
    cmds = re.findall(r"^  (\w+)\s{2,}", top, re.M)
    assert {"estimate", "journal", "sim", "ls", "stat", "top",
            "reclaim"} <= set(cmds)
    man_path = os.path.join(os.path.dirname(v05ctl), "v05ctl.1")
    man = open(man_path).read().replace("\\-", "-").replace("\\e", "\\")
    for c in cmds:
        r = subprocess.run([v05ctl, c, "--help"], capture_output=True,
                           text=True)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: v05ctl {c}")
        assert f".SS {c}\n" in man
        for line in r.stdout.splitlines():
            if line.strip():
                assert line in man, (c, line)
