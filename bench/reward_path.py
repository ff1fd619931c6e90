#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The files a reward's path crosses, from its lane to its advantage.

A measure of the code's shape, not of time: which functions a reward can
reach between being read from its lane and its advantages being written
into the slot, and in how many files they are written.

How it is measured (every step reproducible from a build directory):
- Every source file of the library (the v05_internal objects in
  BUILD/compile_commands.json) is compiled again with its own command but
  at -O0 with -fcallgraph-info, -ffunction-sections and -fdata-sections,
  so that a header's static inline function is a call with its own
  definition's file (gcc's callgraph file names it), and each function
  and each table has its own section.
- A function uses: what it calls directly (the callgraph files), and what
  its code names (the relocations of its section: a callback it hands
  on, a table it reads). A table uses what its initializer names (the
  relocations of its data section). An indirect call may call any
  function of the configuration's rows: the rule table's row of MODE
  (v05__rule_<row>, where there is a rule table) and the schedule the
  plugin would run (v05__sched_<x>); a table's reference to any other row
  is left out, as the configuration never reads it.
- The path: every function reachable from where a reward enters (the
  lanes' drain, v05__lanes_drain, and the record function v05_poll hands
  it, v05__apply_lane), not going on past v05__finalize_with, where the
  advantages are written into the slot (what finalization does after
  that, the completion, the journal record, the support entry, the
  decision queued, is not the reward's way to its advantage).
- Reported: the functions on the path, the files that define them (a
  header counts when one of its inline functions is on the path), the
  steps between files (distinct caller-file -> callee-file pairs), and the
  climbs among them (a step from a lower layer's file to a higher one's:
  shm/ < rules < journal < mechanics < schedules < the top; before
  plugin/ had folders, a file's layer is the folder commit 13a7a74 moved
  it to).

  bench/reward_path.py BUILD_DIR [--mode MODE] [--schedule rounds|stream]
                       [--list] [--json]
"""
import argparse
import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile

SOURCES = ("v05__lanes_drain", "v05__apply_lane")
SINK = "v05__finalize_with"

# Where commit 13a7a74 (plugin/ in folders) moved each file of the flat
# plugin/: the layer of a file measured at a commit before it.
FLAT = {
    "rules": "stats.c stats_core.h eb.c eb_state.c eb_math.h rule_ada.c "
             "rule_knapsack.c rule_greso.c rule_ebpo.c rule_pc.c splitmix.h",
    "journal": "journal.c journal.h journal_format.h journal_read.c",
    "mechanics": "dispatch.c finalize.c eb_fit.c mechanics.h internal.h "
                 "vocab.h queue.c slots.c support.c reject.c probes.h "
                 "one_thread.h",
    "schedules": "sched_rounds.c sched_stream.c sched_eb_barrier.c "
                 "sched_eb_stream.c schedule.h",
}
RANK = {"shm": 0, "rules": 1, "journal": 2, "mechanics": 3, "schedules": 4,
        "top": 5}
FLAT_LAYER = {f: layer for layer, files in FLAT.items()
              for f in files.split()}

# The schedule a configuration runs: (mode is v05-eb, or its row fits in
# waves) x schedule; and the rule table's row name of each mode.
ROWS = {"v05": "v05", "v05-fixed": "v05_fixed", "grpo": "grpo",
        "dapo": "dapo", "v05-eb": "eb", "reinforce-ada": "ada",
        "reinforce-ada-pos": "ada_pos", "knapsack-prior": "knapsack_prior",
        "knapsack": "knapsack", "greso": "greso", "ebpo": "ebpo",
        "pilot-commit": "pc"}


def layer(path):
    """shm, rules, journal, mechanics, schedules, top; None elsewhere."""
    parts = path.split("/")
    if parts[0] == "shm":
        return "shm"
    if parts[0] != "plugin":
        return None
    if len(parts) == 3 and parts[1] in RANK:
        return parts[1]
    return FLAT_LAYER.get(parts[-1], "top")


def compile_all(build, out):
    """Recompile each library file at -O0 with the callgraph; returns
    [(source path, object path, callgraph path)]."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = json.load(f)
    done = []
    for c in cmds:
        if not c.get("output", "").startswith("libv05_internal.a.p/"):
            continue
        args = shlex.split(c["command"])
        keep, skip = [], 0
        for a in args:
            if skip:
                skip -= 1
                continue
            if a in ("-o", "-MQ", "-MF"):
                skip = 1
                continue
            if a == "-MD" or re.match(r"-O[0-9sgz]?$", a) or \
               a.startswith("-fdiagnostics-color"):
                continue
            keep.append(a)
        obj = os.path.join(out, os.path.basename(c["output"]))
        subprocess.run(keep + ["-O0", "-fcallgraph-info", "-ffunction-sections",
                               "-fdata-sections", "-o", obj],
                       cwd=c["directory"], check=True)
        src = os.path.realpath(os.path.join(c["directory"], c["file"]))
        done.append((src, c["directory"], obj, obj[:-2] + ".ci"))
    return done


def rel(path, root):
    return os.path.relpath(os.path.realpath(path), root)


def parse_ci(ci, root, base):
    """{title: (file, name)} of the functions the unit defines (gcc labels
    them with their definition's place; a callee defined elsewhere is an
    ellipse labelled with its declaration, left out), and [(caller title,
    callee title)]."""
    nodes, edges = {}, []
    node = re.compile(r'node: \{ title: "([^"]+)" label: "([^"\\]+)\\n([^":]+):')
    edge = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
    with open(ci) as f:
        for line in f:
            m = node.match(line)
            if m:
                if "shape : ellipse" in line:
                    continue
                path = m.group(3)
                if not os.path.isabs(path):
                    path = os.path.join(base, path)
                nodes[m.group(1)] = (rel(path, root), m.group(2))
                continue
            m = edge.match(line)
            if m:
                edges.append((m.group(1), m.group(2)))
    return nodes, edges


def relocations(obj):
    """{section: [target symbol]} for .text.* and data sections."""
    r = subprocess.run(["readelf", "-rW", obj], capture_output=True,
                       text=True, check=True).stdout
    out = collections.defaultdict(list)
    sec = None
    for line in r.splitlines():
        m = re.match(r"Relocation section '\.rela(\S+)'", line)
        if m:
            sec = m.group(1)
            continue
        parts = line.split()
        if sec and len(parts) >= 5 and re.match(r"[0-9a-f]{16}$", parts[0]):
            out[sec].append(parts[4])
    return out


def defined_data(obj):
    """Data symbols of the object: {name: global?}."""
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True,
                       check=True).stdout
    out = {}
    for line in r.splitlines():
        p = line.split()
        if len(p) >= 2 and p[1] in "DdRrBbVv":
            out[p[0]] = p[1].isupper()
    return out


def build_graph(units, root):
    """Nodes: ("f", file, name) for functions, ("d", key) for tables."""
    g = collections.defaultdict(set)
    indirect = set()          # functions with an indirect call site
    global_fn = {}            # name -> node of a global function
    global_data = {}          # name -> node
    per_unit = []
    for src, cwd, obj, ci in units:
        nodes, edges = parse_ci(ci, root, cwd)
        data = defined_data(obj)
        per_unit.append((src, obj, nodes, edges, data))
        for title, (path, name) in nodes.items():
            if ":" not in title:      # a global function: title is its name
                global_fn[name] = ("f", path, name)
        for name, is_global in data.items():
            if is_global:
                global_data[name] = ("d", name)
    for src, obj, nodes, edges, data in per_unit:
        fn = {title: ("f",) + nodes[title] for title in nodes}
        by_name = {}
        for title, (path, name) in nodes.items():
            by_name.setdefault(name, ("f", path, name))

        def target(sym):
            if sym.startswith(".text."):
                sym = sym[len(".text."):]
            if sym in by_name:
                return by_name[sym]
            if sym in global_fn:
                return global_fn[sym]
            if sym in data:
                return ("d", sym) if data[sym] else ("d", src + ":" + sym)
            if sym in global_data:
                return global_data[sym]
            for prefix in (".data.rel.ro.local.", ".data.rel.ro.",
                           ".rodata.", ".data.", ".bss."):
                if sym.startswith(prefix):
                    return target(sym[len(prefix):])
            return None

        for a, b in edges:
            if a not in fn:
                continue
            if b == "__indirect_call":
                indirect.add(fn[a])
            elif b in fn:
                g[fn[a]].add(fn[b])
            elif b in global_fn:
                g[fn[a]].add(global_fn[b])
        for sec, syms in relocations(obj).items():
            if sec.startswith(".text."):
                src_node = target(sec)
            elif sec.startswith((".data", ".rodata")):
                src_node = target(sec)
            else:
                continue
            if not src_node:
                continue
            for s in syms:
                t = target(s)
                if t and t != src_node:
                    g[src_node].add(t)
    return g, indirect


def rows_of(mode, schedule, g):
    """The row objects the configuration runs, and every row object."""
    rows = {n for n in g if n[0] == "d" and
            re.match(r"v05__(rule|sched)_\w+$", n[1])}
    rule_tables = any(n[1].startswith("v05__rule_") for n in rows)
    eb_waves = mode == "v05-eb"
    sched = {("stream", True): "v05__sched_eb_stream",
             ("rounds", True): "v05__sched_eb_barrier",
             ("stream", False): "v05__sched_stream",
             ("rounds", False): "v05__sched_rounds"}[(schedule, eb_waves)]
    keep = {("d", sched)}
    if rule_tables:
        keep.add(("d", "v05__rule_" + ROWS[mode]))
    return keep, rows


def path(g, indirect, keep, rows):
    """Functions and tables reachable from SOURCES, stopping at SINK."""
    starts = [n for n in g if n[0] == "f" and n[2] in SOURCES]
    starts += [n for v in g.values() for n in v
               if n[0] == "f" and n[2] in SOURCES]
    seen, todo = set(), list(dict.fromkeys(starts))
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v[0] == "f" and v[2] == SINK:
            continue
        nxt = set(g.get(v, ()))
        if v in indirect:
            nxt |= keep
        for w in nxt:
            if w in rows and w not in keep:
                continue
            if w not in seen:
                todo.append(w)
    return seen


def measure(build, mode, schedule, root):
    with tempfile.TemporaryDirectory() as t:
        units = compile_all(build, t)
        g, indirect = build_graph(units, root)
    keep, rows = rows_of(mode, schedule, g)
    on = path(g, indirect, keep, rows)
    fns = sorted(n for n in on if n[0] == "f")
    files = sorted({n[1] for n in fns})
    steps, climbs = set(), set()
    for v in fns:
        for w in g.get(v, ()):
            if w[0] == "f" and w in on and w[1] != v[1]:
                steps.add((v[1], w[1]))
    for a, b in steps:
        la, lb = layer(a), layer(b)
        if la and lb and RANK[lb] > RANK[la]:
            climbs.add((a, b))
    return {"mode": mode, "schedule": schedule, "functions": len(fns),
            "files": files, "steps": sorted(steps), "climbs": sorted(climbs),
            "by_file": {f: sorted(n[2] for n in fns if n[1] == f)
                        for f in files}}


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head: no traceback
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--mode", default="v05-eb", choices=sorted(ROWS))
    ap.add_argument("--schedule", default="stream",
                    choices=["rounds", "stream"])
    ap.add_argument("--list", action="store_true",
                    help="list each file's functions on the path")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv[1:])
    build = os.path.abspath(a.build)
    with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
        root = os.path.realpath(json.load(f)["directories"]["source"])
    r = measure(build, a.mode, a.schedule, root)
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    print("mode %s, schedule %s: %d functions in %d files, %d steps between "
          "files, %d of them climbs" % (r["mode"], r["schedule"],
                                        r["functions"], len(r["files"]),
                                        len(r["steps"]), len(r["climbs"])))
    for f in r["files"]:
        extra = ": " + ", ".join(r["by_file"][f]) if a.list else ""
        print("  %-10s %s%s" % (layer(f) or "-", f, extra))
    if a.list and r["climbs"]:
        print("climbs:")
        for x, y in r["climbs"]:
            print("  %s -> %s" % (x, y))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
