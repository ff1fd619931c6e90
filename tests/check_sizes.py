#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""No source file over 600 lines, no library function over 150.

Source files: C and C++ (.c, .h, .cpp), Python (.py), shell (.sh), and
scripts without an extension whose first line runs sh, bash or python;
every one the repository tracks (git ls-files; without git, every file
under the root but build trees and virtual environments). Library
functions: the C functions of shm/ and plugin/ (a definition's lines from
its signature to the closing brace at column 0, kernel style).

The allow-list (tests/sizes-allow.txt) names files over the line limit
for now: it must be empty; an entry that is no longer over the limit is
reported, so the list does not outlive its files.

  check_sizes.py SOURCE_ROOT [ALLOW_LIST]
  check_sizes.py --self-test
"""
import os
import re
import subprocess
import sys
import tempfile

MAX_LINES = 600
MAX_FUNCTION = 150
EXTENSIONS = (".c", ".h", ".cpp", ".py", ".sh")
LIBRARY = ("shm/", "plugin/")
SKIP_DIRS = {".git", "build-venv", "node_modules", "__pycache__"}


def tracked(root):
    """Every file of the tree, relative to root."""
    try:
        r = subprocess.run(["git", "ls-files", "-z"], cwd=root,
                           capture_output=True, check=True)
        return sorted(f for f in r.stdout.decode().split("\0")
                      if f and os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        out = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS and
                       not x.startswith("build")]
            out += [os.path.relpath(os.path.join(d, f), root) for f in files]
        return sorted(out)


def is_source(root, rel):
    if rel.endswith(EXTENSIONS):
        return True
    if "." in os.path.basename(rel):
        return False
    try:
        with open(os.path.join(root, rel), "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return re.match(rb"#!.*\b(sh|bash|python[0-9.]*)\b", first) is not None


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def functions(text):
    """(name, first line, number of lines) of each C function definition:
    a body opened by "{" alone at column 0 and closed by "}" at column 0,
    its signature the lines above back to a blank line, a preprocessor
    line, the end of a comment or of a declaration."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] != "{":
            i += 1
            continue
        start = i
        while start > 0:
            prev = lines[start - 1]
            if (not prev.strip() or prev.startswith("#") or
                    prev.rstrip().endswith((";", "*/", "}")) or
                    prev.startswith("}")):
                break
            start -= 1
        end = i + 1
        while end < len(lines) and not lines[end].startswith("}"):
            end += 1
        sig = " ".join(lines[start:i])
        m = re.search(r"(\w+)\s*\(", sig)
        out.append((m.group(1) if m else "?", start + 1, end - start + 1))
        i = end + 1
    return out


def read_allow(path):
    allow = set()
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    allow.add(line)
    return allow


def check(root, allow_path):
    allow = read_allow(allow_path)
    bad, notes, files, seen = [], [], 0, set()
    for rel in tracked(root):
        if not is_source(root, rel):
            continue
        files += 1
        path = os.path.join(root, rel)
        n = count_lines(path)
        if n > MAX_LINES:
            if rel in allow:
                seen.add(rel)
                notes.append("%s: %d lines (allowed for now: %s)" %
                             (rel, n, os.path.basename(allow_path)))
            else:
                bad.append("%s: %d lines, over %d: split it by job" %
                           (rel, n, MAX_LINES))
        if rel.startswith(LIBRARY) and rel.endswith((".c", ".h")):
            with open(path, errors="replace") as f:
                for name, line, size in functions(f.read()):
                    if size > MAX_FUNCTION:
                        bad.append("%s:%d: %s() is %d lines, over %d" %
                                   (rel, line, name, size, MAX_FUNCTION))
    for rel in sorted(allow - seen):
        notes.append("%s is allowed in %s but no longer over %d lines: "
                     "take it off the list" %
                     (rel, os.path.basename(allow_path), MAX_LINES))
    for line in notes:
        print(line)
    for line in bad:
        print(line)
    if bad:
        print("check_sizes: %d file(s) or function(s) too long" % len(bad))
        return 1
    print("check_sizes: ok (%d source files; none over %d lines%s; no "
          "library function over %d)" %
          (files, MAX_LINES, ", %d allowed for now" % len(seen) if seen else
           "", MAX_FUNCTION))
    return 0


def self_test():
    def c_file(body_lines):
        body = "\n".join("\tx += %d;" % i for i in range(body_lines))
        return ("/* a */\nstatic int f(int x,\n\t     int y)\n{\n" + body +
                "\n\treturn x + y;\n}\n")

    def quiet(t, allow):
        with open(os.devnull, "w") as null:
            saved, sys.stdout = sys.stdout, null
            try:
                return check(t, allow)
            finally:
                sys.stdout = saved

    cases = [  # (path, text, must it fail)
        ("a.py", "x = 1\n" * MAX_LINES, False),
        ("a.py", "x = 1\n" * (MAX_LINES + 1), True),
        ("tools/run", "#!/bin/sh\n" + ":\n" * MAX_LINES, True),
        ("tools/run", "#!/usr/bin/env python3\n" + "x = 1\n" * MAX_LINES, True),
        ("data.txt", "x\n" * (MAX_LINES + 5), False),
        ("shm/s.c", c_file(MAX_FUNCTION - 5), False),
        ("shm/s.c", c_file(MAX_FUNCTION - 4), True),
        ("plugin/rules/r.h", c_file(MAX_FUNCTION), True),
        ("tests/t.c", c_file(MAX_FUNCTION), False),
    ]
    caught = 0
    for rel, text, must_fail in cases:
        with tempfile.TemporaryDirectory() as t:
            path = os.path.join(t, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            with open(os.path.join(t, "ok.c"), "w") as f:
                f.write(c_file(3))
            failed = quiet(t, None) != 0
            if failed != must_fail:
                print("self-test: %s (%d lines) %s" %
                      (rel, text.count("\n"),
                       "passes" if must_fail else "fails"))
                check(t, None)
                return 1
            caught += must_fail
            if must_fail and not rel.endswith((".c", ".h")):
                allow = os.path.join(t, "allow.txt")
                with open(allow, "w") as f:
                    f.write("# must be empty\n%s\n" % rel)
                if quiet(t, allow) != 0:
                    print("self-test: %s fails though allowed" % rel)
                    return 1
    print("check_sizes: self-test ok (%d violations caught, the "
          "allow-list honoured)" % caught)
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) not in (2, 3):
        print("usage: check_sizes.py SOURCE_ROOT [ALLOW_LIST] | --self-test")
        return 2
    return check(argv[1], argv[2] if len(argv) == 3 else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
