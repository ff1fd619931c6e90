#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The built library's ABI against the committed descriptions (abi/), the
rule of docs/PACKAGING.md ("One version series"):

1. What the library says of its structs (v05_abi()) is what its DWARF
   says (gdb's `ptype /o`), field for field, for every struct the public
   headers define: a field left out of plugin/abi.c's table fails here.
2. The description of this build (version, soname, every public struct's
   size and fields, every exported symbol's version node) equals
   abi/v05-VERSION.abi for meson.build's version: a struct that changes
   size or a field, or a symbol that moves node, fails until that file
   says so (and then the rules below hold it to the version and soname).
3. Against every earlier release's description (abi/v05-*.abi): each of
   its symbols is still exported in the same node; and under the same
   soname, each of its structs is laid out as it was (a size-tagged one
   may only grow at its end, a reserved field only be renamed), else the
   soname's major must have changed.

  check_abi.py LIBRARY SOURCE_ROOT [--dump PROG]            check
  check_abi.py LIBRARY SOURCE_ROOT [--dump PROG] --write    write
      abi/v05-VERSION.abi; PROG (tests/abi_dump.c, linked with LIBRARY:
      meson test 'abi' passes it) prints v05_abi(), else LIBRARY is loaded
      with ctypes (not a sanitizer build then)
  check_abi.py LIBRARY OLD_ROOT --dwarf-only --version V --write --abi-dir abi
      describe a library from before v05_abi() from its DWARF alone (how
      abi/v05-0.4.0.abi was made from the tree 0.4 shipped as, 19e0b0e)
"""
import argparse
import ctypes
import difflib
import glob
import os
import re
import subprocess
import sys

RULE = ("docs/PACKAGING.md, 'One version series': a struct that grows "
        "outside its reserved or size-tagged room, or changes a field, is "
        "an incompatible change (new soname major in meson.build's "
        "soversion); a symbol's node is the release that added it and "
        "never moves")


def public_structs(root):
    names = set()
    for h in glob.glob(os.path.join(root, "include", "v05", "*.h")):
        with open(h) as f:
            names |= set(re.findall(r"^struct (v05_\w+) \{", f.read(), re.M))
    return names


def dwarf(lib, structs):
    """{struct: (size, [(field, offset, size, type)])} from gdb."""
    args = ["gdb", "-batch", "-nx"]
    for s in sorted(structs):
        args += ["-ex", f"ptype /o struct {s}"]
    out = subprocess.run(args + [lib], capture_output=True, text=True,
                         check=True).stdout
    res, cur, depth = {}, None, 0
    row = re.compile(r"^/\*\s+(\d+)\s+\|\s+(\d+) \*/\s+(.*)$")
    for line in out.splitlines():
        m = re.search(r"type = struct (v05_\w+) \{$", line)
        if m:
            cur, depth = m.group(1), 1
            res[cur] = [0, []]
            continue
        if cur is None:
            continue
        m = row.match(line)
        if m:
            off, size, decl = int(m.group(1)), int(m.group(2)), m.group(3)
            if decl.endswith("{"):  # a nested struct: one field
                if depth == 1:
                    nested = (off, size, decl[:-1].strip())
                depth += 1
            elif depth == 1:
                res[cur][1].append(field(decl.rstrip(";"), off, size))
            continue
        m = re.match(r"^\s*\} (\w+);$", line)
        if m:
            depth -= 1
            if depth == 1:
                res[cur][1].append((m.group(1), nested[0], nested[1],
                                    nested[2]))
            continue
        m = re.search(r"total size \(bytes\):\s+(\d+)", line)
        if m and depth == 1:
            res[cur][0] = int(m.group(1))
        if line.strip() == "}" and depth == 1:
            cur = None
    missing = structs - set(res)
    if missing:
        sys.exit(f"check_abi: no DWARF for {sorted(missing)} in {lib} "
                 "(a build without -g?)")
    return {k: (v[0], v[1]) for k, v in res.items()}


def field(decl, off, size):
    m = re.match(r"^(.*?)(\w+)((?:\[\d+\])*)$", decl)
    typ = re.sub(r"\s*\*", "*", m.group(1).strip()).replace("_Bool", "bool")
    return (m.group(2), off, size, typ + m.group(3))


def library_layouts(text):
    out, tagged = {}, set()
    for line in text.splitlines():
        p = line.split(" ", 5)
        if p[0] == "S":
            out[p[1]] = (int(p[2]), [])
            if len(p) > 3 and p[3] == "tagged":
                tagged.add(p[1])
        elif p[0] == "F":
            out[p[1]][1].append((p[2], int(p[3]), int(p[4]), p[5]))
    return out, tagged


def symbols(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib],
                         capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] != "A" and "@@" in p[2]:
            name, node = p[2].split("@@")
            syms.append((name, node))
    return sorted(syms)


def soname(lib):
    out = subprocess.run(["readelf", "-d", lib], capture_output=True,
                         text=True, check=True).stdout
    return re.search(r"SONAME.*\[(.*)\]", out).group(1)


def describe(version, so, layouts, tagged, syms):
    lines = ["# libv05's ABI: written by tests/check_abi.py --write, checked "
             "by meson test 'abi'", f"version {version}", f"soname {so}"]
    for s in sorted(layouts):
        size, fields = layouts[s]
        lines.append(f"S {s} {size}" + (" tagged" if s in tagged else ""))
        lines += [f"F {s} {n} {o} {z} {t}" for n, o, z, t in fields]
    lines += [f"Y {n} {node}" for n, node in syms]
    return "\n".join(lines) + "\n"


def parse(text):
    d = {"layouts": {}, "tagged": set(), "syms": {}}
    for line in text.splitlines():
        if line.startswith("version "):
            d["version"] = line.split()[1]
        elif line.startswith("soname "):
            d["soname"] = line.split()[1]
        elif line.startswith("Y "):
            _, n, node = line.split()
            d["syms"][n] = node
    d["layouts"], d["tagged"] = library_layouts(text)
    return d


def vkey(v):
    return tuple(int(x) for x in v.split("."))


def compatible(name, old, new, tagged):
    """None, or why struct `name` of a release cannot be read as `new`."""
    (osize, ofields), (nsize, nfields) = old, new
    if name in tagged:
        if nsize < osize or len(nfields) < len(ofields):
            return f"size-tagged, but shrank ({osize} -> {nsize} bytes)"
    elif nsize != osize or len(nfields) != len(ofields):
        return f"{osize} -> {nsize} bytes, {len(ofields)} -> {len(nfields)} fields"
    for a, b in zip(ofields, nfields):
        same_place = a[1:] == b[1:]
        renamed_reserved = a[0] != b[0] and a[0].startswith("reserved")
        if not same_place or (a[0] != b[0] and not renamed_reserved):
            return f"field {a} is now {b}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("root")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--dwarf-only", action="store_true")
    ap.add_argument("--version")
    ap.add_argument("--abi-dir", help="default: ROOT/abi")
    ap.add_argument("--dump", help="a program printing v05_abi()")
    a = ap.parse_args()
    abi_dir = a.abi_dir or os.path.join(a.root, "abi")
    structs = public_structs(a.root)
    syms, so = symbols(a.lib), soname(a.lib)
    fail = []
    if a.dwarf_only:
        layouts, tagged, version = dwarf(a.lib, structs), set(), a.version
    else:
        if a.dump:
            text = subprocess.run([a.dump], capture_output=True, text=True,
                                  check=True).stdout
        else:
            lib = ctypes.CDLL(os.path.abspath(a.lib))
            lib.v05_abi.restype = ctypes.c_char_p
            text = lib.v05_abi().decode()
        version = text.splitlines()[0].split()[1]
        layouts, tagged = library_layouts(text)
        # 1. The library's account against its DWARF.
        if set(layouts) != structs:
            fail.append(f"v05_abi() describes {sorted(set(layouts))}, the "
                        f"headers define {sorted(structs)}")
        for s, want in dwarf(a.lib, structs).items():
            if layouts.get(s) != want:
                got = layouts.get(s, (None, []))
                diff = [f"{x} (v05_abi) against {y} (DWARF)"
                        for x, y in zip(got[1], want[1]) if x != y][:2] or \
                    [f"{got[0]} bytes, {len(got[1])} fields (v05_abi) "
                     f"against {want[0]}, {len(want[1])} (DWARF)"]
                fail.append(f"struct {s}: " + "; ".join(diff) +
                            " (plugin/abi.c's table)")
    mine = describe(version, so, layouts, tagged, syms)
    path = os.path.join(abi_dir, f"v05-{version}.abi")
    if a.write:
        with open(path, "w") as f:
            f.write(mine)
        print(f"check_abi: wrote {path}")
        return 1 if fail else 0
    # 2. This build against its version's committed description.
    if not os.path.exists(path):
        fail.append(f"no {path}: a new version needs its description "
                    "(tests/check_abi.py LIB ROOT --write)")
    else:
        with open(path) as f:
            committed = f.read()
        if committed != mine:
            fail.append(f"the library differs from {path}:\n" + "".join(
                difflib.unified_diff(committed.splitlines(True),
                                     mine.splitlines(True), path, a.lib)) +
                "if this is meant, rewrite the file (--write) and follow "
                + RULE)
    # 3. Every earlier release.
    cur = parse(mine)
    for other in sorted(glob.glob(os.path.join(abi_dir, "v05-*.abi"))):
        with open(other) as f:
            old = parse(f.read())
        if vkey(old["version"]) >= vkey(version):
            continue
        for n, node in sorted(old["syms"].items()):
            if cur["syms"].get(n) != node:
                fail.append(f"{n}@@{node} of {old['version']} is "
                            f"{cur['syms'].get(n, 'gone')} now ({RULE})")
        if old["soname"] != so:
            continue  # a new soname: the structs may differ
        for s, lay in old["layouts"].items():
            why = compatible(s, lay, cur["layouts"].get(s, (0, [])),
                             old["tagged"])
            if why:
                fail.append(f"struct {s}: {why} since {old['version']} "
                            f"under the same soname {so} ({RULE})")
    for msg in fail:
        print("check_abi: " + msg)
    if not fail:
        print(f"check_abi: libv05 {version} ({so}): {len(layouts)} structs, "
              f"{len(syms)} symbols, as abi/v05-{version}.abi says; "
              "compatible with every earlier release's description")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
