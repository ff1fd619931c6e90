#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""No code branches on the mode outside the rule table and config parsing.

A mode is a row of the rule table (plugin/rules/rule.h, table.c): the
library asks the row, never the mode. In every .c and .h of shm/ and
plugin/, with comments and string literals left out, this refuses

  - a mode's name, V05_MODE_<X> (V05_MODE_COUNT, a bound, is no mode);
  - a mode helper, mode_is_<x>() or v05__mode_<x>();
  - a comparison with a mode: mode == x, mode != x, x == mode, mode < x
    (but for a bound: mode < V05_MODE_COUNT);
  - a switch on a mode, and an array indexed by one (mode_names[mode]);

except in the table (plugin/rules/table.c) and config parsing
(plugin/config.c: the defaults, v05_config_mode, the checks).

  check_modes.py SOURCE_ROOT
  check_modes.py --self-test
"""
import os
import re
import sys
import tempfile

SCOPE = ("shm/", "plugin/")
ALLOWED = {"plugin/rules/table.c": "the rule table",
           "plugin/config.c": "config parsing"}

MODE = r"(?:\b|(?<=[.>]))mode\b"
PATTERNS = [
    (re.compile(r"\bV05_MODE_(?!COUNT\b)[A-Z0-9_]+"), "names a mode"),
    (re.compile(r"\b\w*mode_is_\w*|\bv05__mode_\w+"), "a mode helper"),
    (re.compile(MODE + r"\s*(?:==|!=|<=|>=|<(?!<)|>(?!>))"),
     "compares a mode"),
    (re.compile(r"(?:==|!=)\s*(?:[\w]+(?:\.|->))*" + MODE),
     "compares a mode"),
    (re.compile(r"\bswitch\s*\([^)]*" + MODE), "switches on a mode"),
    (re.compile(r"\[\s*(?:[\w]+(?:\.|->))*" + MODE + r"\s*\]"),
     "indexes by a mode"),
]

BOUND = re.compile(MODE + r"\s*(?:<|>=)\s*V05_MODE_COUNT\b")


def strip(text):
    """The code without comments and string or character literals, line
    numbers kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_file(root, rel):
    with open(os.path.join(root, rel), errors="replace") as f:
        code = strip(f.read())
    out = []
    for no, line in enumerate(code.split("\n"), 1):
        # A bound (mode < V05_MODE_COUNT) says nothing of which mode.
        line = BOUND.sub("bound", line)
        for pat, why in PATTERNS:
            m = pat.search(line)
            if m:
                out.append("%s:%d: %s (%s): ask the mode's row "
                           "(plugin/rules/rule.h)" %
                           (rel, no, why, m.group(0).strip()))
                break
    return out


def check(root):
    bad, files = [], 0
    for top in SCOPE:
        for d, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(d, name), root)
                files += 1
                if rel in ALLOWED:
                    continue
                bad += check_file(root, rel)
    for line in bad:
        print(line)
    if bad:
        print("check_modes: %d mode test(s) outside the rule table and "
              "config parsing (docs/LAYOUT.md)" % len(bad))
        return 1
    print("check_modes: ok (%d files; the mode is tested in %s only)" %
          (files, ", ".join(sorted(ALLOWED))))
    return 0


CLEAN = {
    "plugin/rules/table.c": "X(V05_MODE_V05, v05) rules[mode];\n",
    "plugin/config.c": "if (c->params.mode == V05_MODE_V05_EB) x();\n",
    "plugin/mechanics/m.c":
        "/* mode == V05_MODE_V05 in a comment */\n"
        "// V05_MODE_GRPO too\n"
        "static const char *s = \"V05_MODE_DAPO, mode == 1\";\n"
        "if (p->rule->waves == V05__WAVES_FIT) x();\n"
        "if (mode >= V05_MODE_COUNT) return -EINVAL;\n"
        "if (c->file_mode & 0022u) y(); s = st.st_mode == 0 ? a : b;\n"
        "x = p->seg.mode; n = k << mode_shift;\n",
    "shm/s.c": "int f(int mode) { return mode_bits(mode); }\n",
}

PLANTED = [
    ("plugin/mechanics/m.c", "if (p->params.mode == V05_MODE_V05) x();"),
    ("plugin/decide.c", "if (p->params.mode != 3) x();"),
    ("plugin/decide.c", "if (V05_MODE_GRPO == mode) x();"),
    ("plugin/decide.c", "if (3 == p->params.mode) x();"),
    ("plugin/rules/stats.c", "return v05__mode_is_ada(p->mode);"),
    ("plugin/rules/stats.c", "return mode_is_knapsack(m);"),
    ("plugin/schedules/sched.c", "switch (p->params.mode) {"),
    ("plugin/rules/stats.c", "return mode_names[p->mode];"),
    ("plugin/rules/stats.c", "return x ? V05_MODE_EBPO : 0;"),
    ("plugin/rules/rule_x.c", "if (p->mode < 4) x();"),
    ("shm/s.c", "if (mode == 2) x();"),
]


def self_test():
    def tree(t, extra):
        for rel, text in list(CLEAN.items()) + extra:
            path = os.path.join(t, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write(text + "\n")

    def quiet(t):
        with open(os.devnull, "w") as null:
            saved, sys.stdout = sys.stdout, null
            try:
                return check(t)
            finally:
                sys.stdout = saved

    with tempfile.TemporaryDirectory() as t:
        tree(t, [])
        if quiet(t) != 0:
            check(t)
            print("self-test: the clean tree fails")
            return 1
    for rel, line in PLANTED:
        with tempfile.TemporaryDirectory() as t:
            tree(t, [(rel, line)])
            if quiet(t) == 0:
                print("self-test: %s with `%s` passes" % (rel, line))
                return 1
    print("check_modes: self-test ok (%d mode tests caught; comments, "
          "strings, V05_MODE_COUNT and other modes' fields let be)" %
          len(PLANTED))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print("usage: check_modes.py SOURCE_ROOT | --self-test")
        return 2
    return check(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
