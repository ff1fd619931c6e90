#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Who calls whom among the library's files: no circle, no call up a layer.

The library's objects are read with nm: a file uses another when its
object has an undefined symbol (U) that the other's defines (a function
called, or a table or variable named). That gives a graph of files; it
must have no circle (a strongly connected component of more than one
file), and no edge from a lower layer to a higher one:

  shm/ < plugin/rules/ < plugin/journal/ < plugin/mechanics/
       < plugin/schedules/ < plugin/ (the top)

Static functions and a header's inline functions are a file's own, so the
check sees what the compiler left as calls between files; a call through
a table (a schedule's or a rule's row) is seen where the table is named.
tests/check_layering.sh checks the includes; this checks the calls.

  check_calls.py BUILD_DIR SOURCE_ROOT   the library's objects, listed in
                                         BUILD_DIR/compile_commands.json
  check_calls.py --self-test CC [ARG...] plants a circle and calls up a
                                         layer into a small tree compiled
                                         with CC, each of which must fail
"""
import json
import os
import subprocess
import sys
import tempfile

LAYERS = [("shm/", 0), ("plugin/rules/", 1), ("plugin/journal/", 2),
          ("plugin/mechanics/", 3), ("plugin/schedules/", 4),
          ("plugin/", 5)]
NAMES = {0: "shm/", 1: "plugin/rules/", 2: "plugin/journal/",
         3: "plugin/mechanics/", 4: "plugin/schedules/", 5: "plugin/ (top)"}


def layer(path):
    """The layer of a source path, or None for a file outside them."""
    for prefix, rank in LAYERS:
        if path.startswith(prefix):
            rest = path[len(prefix):]
            # plugin/x/y.c for a folder x that is not a layer: not the top.
            if rank == 5 and "/" in rest:
                return None
            return rank
    return None


def objects(build, root):
    """(source path relative to root, object path) of the library's files."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = json.load(f)
    out = []
    for c in cmds:
        obj = c.get("output", "")
        if not obj.startswith("libv05_internal.a.p/"):
            continue
        src = os.path.realpath(os.path.join(c["directory"], c["file"]))
        out.append((os.path.relpath(src, os.path.realpath(root)),
                    os.path.join(c["directory"], obj)))
    return sorted(out)


def symbols(obj):
    """(defined global symbols, undefined symbols) of one object."""
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True,
                       check=True)
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper():
            defined.add(name)
    return defined, used


def graph(files):
    """files: {path: (defined, used)} -> {path: {path: symbol}}."""
    owner = {}
    for path, (defined, _) in files.items():
        for s in defined:
            owner[s] = path
    g = {path: {} for path in files}
    for path, (_, used) in files.items():
        for s in sorted(used):
            to = owner.get(s)
            if to and to != path and to not in g[path]:
                g[path][to] = s
    return g


def circles(g):
    """The strongly connected components of more than one file (Tarjan's
    algorithm, iterative: the graph may be deeper than Python's stack)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def problems(g):
    """Lines naming each circle and each call up a layer."""
    out = []
    for comp in circles(g):
        inside = set(comp)
        edges = ["%s -> %s (%s)" % (a, b, g[a][b])
                 for a in comp for b in sorted(g[a]) if b in inside]
        out.append("circle of %d files: %s" % (len(comp), "; ".join(edges)))
    for a in sorted(g):
        for b in sorted(g[a]):
            la, lb = layer(a), layer(b)
            if la is None or lb is None:
                where = a if la is None else b
                out.append("%s is in no layer (%s)" %
                           (where, ", ".join(NAMES.values())))
            elif lb > la:
                out.append("%s -> %s (%s): %s calls up into %s" %
                           (a, b, g[a][b], NAMES[la], NAMES[lb]))
    return sorted(set(out))


def check(build, root):
    files = {src: symbols(obj) for src, obj in objects(build, root)}
    if not files:
        print("check_calls: no objects of libv05_internal in %s" % build)
        return 1
    g = graph(files)
    bad = problems(g)
    for line in bad:
        print(line)
    edges = sum(len(v) for v in g.values())
    if bad:
        print("check_calls: %d problem(s) in %d files, %d edges "
              "(docs/LAYOUT.md)" % (len(bad), len(g), edges))
        return 1
    print("check_calls: ok (%d files, %d edges, no circle, no call up)" %
          (len(g), edges))
    return 0


# ---- self-test -----------------------------------------------------------

CLEAN = {
    "shm/a.c": "int shm_a(void) { return 1; }\n",
    "plugin/rules/r.c": "int shm_a(void);\nint rule_r(void) { return shm_a(); }\n",
    "plugin/rules/r2.c": "int rule_r(void);\nint rule_r2(void) { return rule_r(); }\n",
    "plugin/journal/j.c": "int jour(void) { return 3; }\n",
    "plugin/mechanics/m.c": "int rule_r2(void);\nint jour(void);\n"
                            "int mech(void) { return rule_r2() + jour(); }\n",
    "plugin/schedules/s.c": "int mech(void);\n"
                            "int (*const sched_row)(void) = mech;\n",
    "plugin/t.c": "extern int (*const sched_row)(void);\n"
                  "int top(void) { return sched_row(); }\n",
    "plugin/t2.c": "int top(void);\nint top2(void) { return top(); }\n",
}

# (file, text appended, what it plants)
PLANTED = [
    ("plugin/rules/r.c", "int mech(void);\nint r_up(void) { return mech(); }\n",
     "a rule calling the mechanics"),
    ("plugin/rules/r.c", "int rule_r2(void);\nint r_c(void) { return rule_r2(); }\n",
     "a circle of two rules"),
    ("shm/a.c", "int rule_r(void);\nint a_up(void) { return rule_r(); }\n",
     "shm/ calling a rule"),
    ("plugin/journal/j.c", "int mech(void);\nint j_up(void) { return mech(); }\n",
     "the journal calling the mechanics"),
    ("plugin/mechanics/m.c", "extern int (*const sched_row)(void);\n"
     "int m_up(void) { return sched_row(); }\n",
     "the mechanics naming a schedule's table"),
    ("plugin/schedules/s.c", "int top(void);\nint s_up(void) { return top(); }\n",
     "a schedule calling the top"),
    ("plugin/t.c", "int top2(void);\nint t_c(void) { return top2(); }\n",
     "a circle in the top"),
    ("plugin/t.c", "int rule_r2(void);\nint t_ok(void) { return rule_r2(); }\n"
     "int mech2(void);\n", None),
]


def build_tree(t, cc, files):
    cmds = []
    for rel, text in files.items():
        src = os.path.join(t, rel)
        os.makedirs(os.path.dirname(src), exist_ok=True)
        with open(src, "w") as f:
            f.write(text)
        obj = "libv05_internal.a.p/" + rel.replace("/", "_") + ".o"
        os.makedirs(os.path.join(t, "build", "libv05_internal.a.p"),
                    exist_ok=True)
        subprocess.run(cc + ["-c", "-o", os.path.join(t, "build", obj), src],
                       check=True)
        cmds.append({"directory": os.path.join(t, "build"),
                     "file": os.path.relpath(src, os.path.join(t, "build")),
                     "output": obj, "command": "cc"})
    with open(os.path.join(t, "build", "compile_commands.json"), "w") as f:
        json.dump(cmds, f)


def quiet_check(t):
    with open(os.devnull, "w") as null:
        saved, sys.stdout = sys.stdout, null
        try:
            return check(os.path.join(t, "build"), t)
        finally:
            sys.stdout = saved


def self_test(cc):
    with tempfile.TemporaryDirectory() as t:
        build_tree(t, cc, CLEAN)
        if quiet_check(t) != 0:
            check(os.path.join(t, "build"), t)
            print("self-test: the clean tree fails")
            return 1
        caught = 0
        for rel, extra, what in PLANTED:
            files = dict(CLEAN)
            files[rel] = files[rel] + extra
            with tempfile.TemporaryDirectory() as t2:
                build_tree(t2, cc, files)
                failed = quiet_check(t2) != 0
            if what is None and failed:
                print("self-test: a call down a layer fails")
                return 1
            if what is not None and not failed:
                print("self-test: %s passes" % what)
                return 1
            caught += what is not None
        files = dict(CLEAN)
        files["plugin/stray/x.c"] = "int stray(void) { return 0; }\n"
        files["plugin/t.c"] += "int stray(void);\nint t_s(void) { return stray(); }\n"
        with tempfile.TemporaryDirectory() as t2:
            build_tree(t2, cc, files)
            if quiet_check(t2) == 0:
                print("self-test: a file in no layer passes")
                return 1
        caught += 1
    print("check_calls: self-test ok (%d violations caught)" % caught)
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        return self_test(argv[2:] or ["cc"])
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-6])
        print("usage: check_calls.py BUILD_DIR SOURCE_ROOT | --self-test CC")
        return 2
    return check(argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
