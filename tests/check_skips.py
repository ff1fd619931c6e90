#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A test CI expects to run must run: every skip of a run is checked
against tests/allowed-skips.txt, where each allowed skip names its test
and says why; any other skip fails (scripts/test runs this after each
meson run and each pytest run).

  check_skips.py meson BUILD_DIR      meson-logs/testlog.json of the last
                                      `meson test`: tests that exited 77
                                      (SKIP), and cmocka cases that called
                                      skip() ("[  SKIPPED ]" in their output)
  check_skips.py junit FILE.xml       a pytest --junitxml report
  check_skips.py --self-test          the checker catches what it must
"""
import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ALLOWED = os.path.join(HERE, "allowed-skips.txt")


def allowed(path=ALLOWED):
    """{name: reason}: one per line, `NAME  REASON` (two spaces or more
    between them), # comments. A meson test is `meson:SUITE/NAME` as meson
    names it without the project ("unit / admit" -> meson:unit/admit), a
    cmocka case `meson:SUITE/NAME:CASE`, a pytest test its node id."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].rstrip()
            if not line:
                continue
            part = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            if len(part) != 2 or not part[1]:
                sys.exit(f"{path}:{n}: an allowed skip needs its reason")
            out[part[0]] = part[1]
    return out


def meson_skips(build):
    """Skipped names of a build's last meson test run."""
    skips = []
    with open(os.path.join(build, "meson-logs", "testlog.json")) as f:
        for line in f:
            t = json.loads(line)
            name = "meson:" + re.sub(r"\s*/\s*", "/",
                                     t["name"].split(":", 1)[-1].strip())
            name = name.replace(" ", "")
            if t.get("result") == "SKIP":
                skips.append(name)
            for case in re.findall(r"^\[\s+SKIPPED\s+\] (\w+)$",
                                   t.get("stdout") or "", re.M):
                skips.append(f"{name}:{case}")
    return skips


def node_id(cls, name, root="."):
    """pytest's node id from a junit classname (dotted: the module's path,
    then any classes) and name: the longest prefix that is a file under
    root (the current directory: scripts/test runs from the repository's
    root) is the module."""
    parts = cls.split(".")
    for i in range(len(parts), 0, -1):
        mod = "/".join(parts[:i]) + ".py"
        if os.path.exists(os.path.join(root, mod)):
            return "::".join([mod] + parts[i:] + [name])
    return "/".join(parts) + ".py::" + name


def junit_skips(path):
    return [node_id(c.get("classname", ""), c.get("name", ""))
            for c in ET.parse(path).getroot().iter("testcase")
            if c.find("skipped") is not None]


def check(skips, ok):
    # Silent when every skip is allowed: the run's output must end with
    # the test runner's own summary (which counts the skips).
    bad = [s for s in skips if s not in ok]
    if bad:
        for s in skips:
            print(f"check_skips: {s} skipped: " +
                  (f"allowed ({ok[s]})" if s in ok else "NOT ALLOWED"))
        print(f"check_skips: {len(bad)} skip(s) not in {ALLOWED}: a test CI "
              "expects to run did not; make it run, or list it with why")
    return 1 if bad else 0


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "meson-logs"))
        with open(os.path.join(d, "meson-logs", "testlog.json"), "w") as f:
            for name, res, out in (
                    ("v05:unit / admit", "SKIP", ""),
                    ("v05:unit / segment", "OK",
                     "[ RUN      ] test_foreign_uid\n"
                     "[  SKIPPED ] test_foreign_uid\n"),
                    ("v05:unit / stats", "OK", "[       OK ] test_x\n")):
                f.write(json.dumps({"name": name, "result": res,
                                    "stdout": out}) + "\n")
        got = meson_skips(d)
        assert got == ["meson:unit/admit",
                       "meson:unit/segment:test_foreign_uid"], got
        root = os.path.dirname(HERE)
        assert node_id("tests.python.test_layouts", "test_x[a]", root) == \
            "tests/python/test_layouts.py::test_x[a]"
        assert node_id("tests.python.test_layouts.TestC", "test_y",
                       root) == "tests/python/test_layouts.py::TestC::test_y"
        xml = os.path.join(d, "r.xml")
        with open(xml, "w") as f:
            f.write('<testsuites><testsuite><testcase classname="tests.'
                    'python.test_a" name="test_b"><skipped message="x"/>'
                    '</testcase><testcase classname="tests.python.test_a" '
                    'name="test_c"/></testsuite></testsuites>')
        got = junit_skips(xml)
        assert got == ["tests/python/test_a.py::test_b"], got
        assert check(got, {}) == 1
        assert check(got, {"tests/python/test_a.py::test_b": "why"}) == 0
        lst = os.path.join(d, "allowed.txt")
        with open(lst, "w") as f:
            f.write("meson:unit/admit\n")
        try:
            allowed(lst)
        except SystemExit as e:
            assert "reason" in str(e)
        else:
            raise AssertionError("a skip without a reason was allowed")
    print("check_skips: self-test ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 3 or argv[1] not in ("meson", "junit"):
        sys.exit(__doc__)
    skips = meson_skips(argv[2]) if argv[1] == "meson" else \
        junit_skips(argv[2])
    return check(skips, allowed())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
