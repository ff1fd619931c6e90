#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate the v05ctl(1) man page from the program's own --help texts, so
the page and the program cannot disagree.
    gen_man.py PATH-TO-v05ctl OUTPUT"""
import re
import subprocess
import sys


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def roff(text):
    """Plain text to roff: escape, keep lines as they are."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line if line else ".sp")
    return "\n".join(out)


def main():
    exe, out = sys.argv[1], sys.argv[2]
    top = run(exe, "--help")
    version = run(exe, "--version").split()[-1]
    cmds = re.findall(r"^  (\w+)\s{2,}(.*)$", top, re.M)
    page = [
        f'.TH V05CTL 1 "" "v05 {version}" "v05 manual"',
        ".SH NAME",
        "v05ctl \\- inspect and exercise v05 from the command line",
        ".SH SYNOPSIS",
        ".nf",
        roff(top.split("\n\n")[0]),
        ".fi",
        ".SH DESCRIPTION",
        ".nf",
        roff(top.split("\n\n", 1)[1]),
        ".fi",
        ".SH COMMANDS",
    ]
    for name, summary in cmds:
        page += [f".SS {name}", roff(summary), ".PP", ".nf",
                 roff(run(exe, name, "--help")), ".fi"]
    page += [
        ".SH ENVIRONMENT",
        ".TP",
        ".B V05_SHM_DIR",
        "Directory of the segments (default /dev/shm).",
        ".SH SEE ALSO",
        "The v05 README and docs/ in the source tree.",
    ]
    with open(out, "w") as f:
        f.write("\n".join(page) + "\n")


if __name__ == "__main__":
    main()
