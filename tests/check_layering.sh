#!/bin/sh
# SPDX-License-Identifier: MIT
# Who may include what (docs/PLUGIN.md, "Layering"), for every #include of
# every .c and .h under the source root:
#   include/   the public API: v05.h, v05/*.h, its own directory's headers
#   shm/       its own headers by bare name ("segment.h"), and the public API
#   plugin/    in folders by layer, lowest first: rules/ < journal/ <
#              mechanics/ < schedules/ < the top (plugin/ itself). A file
#              includes its own folder's headers by bare name, a lower
#              layer's as "../rules/x.h" (the top: "rules/x.h"), shm/'s as
#              "../../shm/x.h" (the top: "../shm/x.h"), and the public API;
#              never a header of its own layer's betters
#   internal/v05-internal/  the in-tree interface: "../../shm/x.h",
#              "../../plugin/x.h", "../../plugin/LAYER/x.h"
#   tools/, tests/, bench/  the public API, "v05-internal/x.h", their own
#              headers; never a path with "..", never shm/ or plugin/ directly
# And a schedule calls no other schedule and nothing of the top
# (v05__schedule_*, v05__decide, v05__collect_check). Calls between files
# are checked on the built objects (tests/check_calls.py: no circle, no
# call up a layer).
# The include paths already refuse "plugin/x.h" in shm/ (meson.build gives no
# target the source root); this catches the relative paths a compiler always
# follows, such as "../plugin/x.h" in shm/. Every named file must exist.
#   check_layering.sh SOURCE_ROOT
#   check_layering.sh --self-test   (a tree with each kind of violation)
set -eu

# check FILE: print "FILE:LINE: include NAME: why" for each forbidden include.
check() {
	f=$1
	dir=${f%/*}
	case $f in
	include/*) layer=include ;;
	shm/*) layer=shm ;;
	plugin/*) layer=plugin ;;
	internal/v05-internal/*) layer=internal ;;
	*) layer=consumer ;;
	esac
	grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" |
	sed 's/^\([0-9]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*\([<"]\)\([^>"]*\)[>"].*/\1 \2 \3/' |
	while read -r line kind name; do
		why=
		public=no
		case $name in
		v05.h | v05/*) case $name in *..*) ;; *) public=yes ;; esac ;;
		esac
		if [ "$kind" = '<' ]; then
			# System headers; only the public API may come this way.
			case $name in
			*..* | shm/* | plugin/* | internal/* | v05-internal/*)
				why="not through <>" ;;
			esac
		elif [ $public = yes ]; then
			:
		else
			case $layer in
			include)
				case $name in
				*/*) why="the public API includes only itself" ;;
				*) [ -f "$dir/$name" ] || why="no $dir/$name" ;;
				esac ;;
			shm)
				case $name in
				*/*) why="shm/ includes only its own headers and the public API" ;;
				*) [ -f "shm/$name" ] || why="no shm/$name" ;;
				esac ;;
			plugin)
				why=$(plugin_include "$f" "$name") ;;
			internal)
				case $name in
				../../shm/*/* | ../../plugin/*/*/* | ../../*/*..*) why="not a layer's header" ;;
				../../plugin/*/*)
					case $name in
					../../plugin/rules/* | ../../plugin/journal/* | \
					../../plugin/mechanics/* | ../../plugin/schedules/*)
						[ -f "${name#../../}" ] || why="no ${name#../../}" ;;
					*) why="not a layer of plugin/" ;;
					esac ;;
				../../shm/* | ../../plugin/*)
					[ -f "${name#../../}" ] || why="no ${name#../../}" ;;
				*/*) why="internal/ forwards to shm/ and plugin/ only" ;;
				*) [ -f "$dir/$name" ] || why="no $dir/$name" ;;
				esac ;;
			consumer)
				case $name in
				*..*) why="no relative path out of the directory" ;;
				shm/* | plugin/* | internal/* | include/*)
					why="internals only through v05-internal/*.h" ;;
				v05-internal/*)
					[ -f "internal/$name" ] || why="no internal/$name" ;;
				esac ;;
			esac
		fi
		close='"'
		[ "$kind" = '"' ] || close='>'
		[ -z "$why" ] || echo "$f:$line: include $kind$name$close: $why"
	done
}

# The rank of a folder of plugin/ (the top: plugin/ itself), or nothing.
rank() {
	case $1 in
	rules) echo 1 ;;
	journal) echo 2 ;;
	mechanics) echo 3 ;;
	schedules) echo 4 ;;
	top) echo 5 ;;
	esac
}

# plugin_include FILE NAME: why plugin/.../FILE may not include "NAME", or
# nothing. A folder's file includes its own folder's headers by bare name,
# a lower layer's through "../LAYER/" (the top's: "LAYER/"), shm/'s through
# "../../shm/" (the top's: "../shm/").
plugin_include() {
	rel=${1#plugin/}
	case $rel in
	*/*/*) echo "plugin/ has one level of folders"; return ;;
	*/*) own=${rel%%/*}; up=../; shm=../../shm/ ;;
	*) own=top; up=; shm=../shm/ ;;
	esac
	mine=$(rank "$own")
	[ -n "$mine" ] || { echo "plugin/$own/ is not a layer (rules, journal, mechanics, schedules)"; return; }
	case $2 in
	"$shm"*/* | "$shm"*..*) echo "not a header of shm/" ;;
	"$shm"*) [ -f "shm/${2#"$shm"}" ] || echo "no shm/${2#"$shm"}" ;;
	"$up"*/*)
		to=${2#"$up"}
		layer=${to%%/*}
		theirs=$(rank "$layer")
		case $to in
		*/*/* | *..*) theirs=bad ;;
		esac
		if [ "$theirs" = bad ]; then
			echo "not a header of a layer of plugin/"
		elif [ -z "$theirs" ] || [ "$layer" = top ]; then
			echo "not a layer of plugin/ (rules, journal, mechanics, schedules)"
		elif [ "$theirs" -gt "$mine" ]; then
			echo "plugin/$layer/ is above plugin/$own/: a layer includes only its own and lower layers' headers"
		elif [ ! -f "plugin/$to" ]; then
			echo "no plugin/$to"
		fi ;;
	*/*) echo "plugin/ includes its own folder's headers, lower layers', shm/'s and the public API only" ;;
	*)
		if [ $own = top ]; then
			[ -f "plugin/$2" ] || echo "no plugin/$2"
		else
			[ -f "plugin/$own/$2" ] || echo "no plugin/$own/$2"
		fi ;;
	esac
}

# A schedule calls no other schedule and nothing of the top.
check_schedules() {
	for f in plugin/schedules/sched_*.c; do
		[ -f "$f" ] || continue
		own=$(sed -n 's/^const struct v05__schedule \(v05__sched_[a-z_]*\) =.*/\1/p' "$f")
		grep -n 'v05__schedule_[a-z_]*(\|v05__decide(\|v05__collect_check(\|v05__sched_[a-z_]*' "$f" |
		grep -v "$own" | sed "s|^|$f:|; s|\$|: a schedule calls no other schedule and nothing of the top|"
	done
}

run() {
	cd "$1"
	out=$(find include shm plugin internal tools tests bench \
		-name '*.[ch]' -type f 2>/dev/null | LC_ALL=C sort |
		while read -r f; do check "$f"; done; check_schedules)
	if [ -n "$out" ]; then
		echo "$out"
		echo "check_layering: $(echo "$out" | wc -l) forbidden include(s)" \
			"(docs/PLUGIN.md, \"Layering\")"
		return 1
	fi
	echo "check_layering: ok"
}

self_test() {
	me=$(cd "${0%/*}" && pwd)/${0##*/}
	t=$(mktemp -d)
	trap 'rm -rf "$t"' EXIT
	mkdir -p "$t/include/v05" "$t/shm" "$t/plugin/rules" "$t/plugin/journal" \
		"$t/plugin/mechanics" "$t/plugin/schedules" \
		"$t/internal/v05-internal" "$t/tests/util"
	echo '#include "v05/a.h"' >"$t/include/v05.h"
	echo '#include <stdint.h>' >"$t/include/v05/a.h"
	echo '#include "b.h"' >>"$t/include/v05/a.h"
	: >"$t/include/v05/b.h"
	printf '#include "v05/a.h"\n' >"$t/shm/s.h"
	printf '#include "s.h"\n#include "v05.h"\n' >"$t/shm/s.c"
	printf '#include "schedules/schedule.h"\n#include "../shm/s.h"\n' >"$t/plugin/p.h"
	printf '#include "p.h"\n#include "../shm/s.h"\n#include "rules/r.h"\n' >"$t/plugin/p.c"
	printf '#include "../../shm/s.h"\n' >"$t/plugin/rules/r.h"
	printf '#include "r.h"\n#include "v05/a.h"\n' >"$t/plugin/rules/r.c"
	: >"$t/plugin/journal/j.h"
	printf '#include "../rules/r.h"\n#include "../journal/j.h"\n' \
		>"$t/plugin/mechanics/mechanics.h"
	printf '#include "mechanics.h"\n#include "../../shm/s.h"\n' \
		>"$t/plugin/mechanics/dispatch.c"
	printf '#include "../mechanics/mechanics.h"\n' >"$t/plugin/schedules/schedule.h"
	printf '#include "schedule.h"\nconst struct v05__schedule v05__sched_a = {\n' \
		>"$t/plugin/schedules/sched_a.c"
	printf '#include "../../shm/s.h"\n#include "../../plugin/p.h"\n#include "../../plugin/mechanics/mechanics.h"\n' \
		>"$t/internal/v05-internal/i.h"
	: >"$t/tests/util/u.h"
	printf '#include <stdio.h>\n#include "v05-internal/i.h"\n#include "util/u.h"\n' \
		>"$t/tests/t.c"
	sh "$me" "$t" </dev/null >/dev/null || { echo "self-test: a clean tree fails"; sh "$me" "$t"; exit 1; }
	n=0
	while IFS='|' read -r file inc; do
		cp "$t/$file" "$t/saved"
		echo "#include $inc" >>"$t/$file"
		if sh "$me" "$t" </dev/null >/dev/null; then
			echo "self-test: $file with #include $inc passes"
			exit 1
		fi
		mv "$t/saved" "$t/$file"
		n=$((n + 1))
	done <<-EOF
	shm/s.c|"../plugin/p.h"
	shm/s.c|"plugin/p.h"
	shm/s.h|"v05-internal/i.h"
	shm/s.c|<plugin/p.h>
	shm/s.c|"missing.h"
	plugin/p.c|"../tests/util/u.h"
	plugin/p.c|"../shm/../plugin/p.h"
	plugin/p.c|"v05-internal/i.h"
	include/v05/a.h|"../../shm/s.h"
	include/v05/b.h|"v05-internal/i.h"
	internal/v05-internal/i.h|"../../tests/util/u.h"
	tests/t.c|"shm/s.h"
	tests/t.c|"../shm/s.h"
	tests/t.c|"../plugin/p.h"
	tests/util/u.h|"../../plugin/p.h"
	tests/t.c|"v05-internal/missing.h"
	plugin/p.c|"rules/missing.h"
	plugin/p.c|"tools/x.h"
	plugin/rules/r.c|"../mechanics/mechanics.h"
	plugin/rules/r.c|"../p.h"
	plugin/rules/r.c|"../../plugin/p.h"
	plugin/rules/r.c|"../shm/s.h"
	plugin/rules/r.c|"../../shm/../plugin/p.h"
	plugin/rules/r.c|"../rules/r.h/../r.h"
	plugin/journal/j.h|"../mechanics/mechanics.h"
	plugin/mechanics/dispatch.c|"../schedules/schedule.h"
	plugin/mechanics/dispatch.c|"../top.h"
	plugin/mechanics/dispatch.c|"schedules/schedule.h"
	plugin/schedules/sched_a.c|"../p.h"
	plugin/schedules/sched_a.c|"../stray/x.h"
	internal/v05-internal/i.h|"../../plugin/stray/x.h"
	internal/v05-internal/i.h|"../../plugin/rules/missing.h"
	EOF
	# A schedule calling the top, or another schedule.
	for call in 'v05__schedule_progress(p, b);' 'v05__sched_b.progress(p, b);'; do
		cp "$t/plugin/schedules/sched_a.c" "$t/saved"
		echo "$call" >>"$t/plugin/schedules/sched_a.c"
		if sh "$me" "$t" </dev/null >/dev/null; then
			echo "self-test: plugin/schedules/sched_a.c with $call passes"
			exit 1
		fi
		mv "$t/saved" "$t/plugin/schedules/sched_a.c"
		n=$((n + 1))
	done
	sh "$me" "$t" </dev/null >/dev/null || { echo "self-test: the restored tree fails"; exit 1; }
	echo "check_layering: self-test ok ($n violations caught)"
}

if [ "${1:-}" = --self-test ]; then
	self_test
else
	run "${1:?usage: check_layering.sh SOURCE_ROOT | --self-test}"
fi
