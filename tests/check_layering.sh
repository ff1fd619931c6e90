#!/bin/sh
# SPDX-License-Identifier: MIT
# Who may include what (docs/PLUGIN.md, "Layering"), for every #include of
# every .c and .h under the source root:
#   include/   the public API: v05.h, v05/*.h, its own directory's headers
#   shm/       its own headers by bare name ("segment.h"), and the public API
#   plugin/    its own by bare name, shm/'s as "../shm/x.h", the public API
#   internal/v05-internal/  the in-tree interface: "../../shm/x.h",
#              "../../plugin/x.h"
#   tools/, tests/, bench/  the public API, "v05-internal/x.h", their own
#              headers; never a path with "..", never shm/ or plugin/ directly
# Inside plugin/, the decision core flows one way (docs/PLUGIN.md): rules
# (stats.c, rule_*.c, eb.c, eb_state.c, stats_core.h, eb_math.h) include none of
# internal.h, mechanics.h, schedule.h, top.h; mechanics (dispatch.c,
# finalize.c, eb_fit.c, mechanics.h) neither schedule.h nor top.h;
# schedules (sched_*.c, schedule.h) not top.h, and a schedule calls no
# other schedule and nothing of the top (v05__schedule_*, v05__decide,
# v05__collect_check).
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
				case $name in
				../shm/*/* | ../shm/*..*) why="not a header of shm/" ;;
				../shm/*) [ -f "${name#../}" ] || why="no ${name#../}" ;;
				*/*) why="plugin/ includes its own headers, ../shm/ and the public API only" ;;
				*) [ -f "plugin/$name" ] || why="no plugin/$name" ;;
				esac ;;
			internal)
				case $name in
				../../shm/*/* | ../../plugin/*/* | ../../*/*..*) why="not a layer's header" ;;
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
		if [ -z "$why" ] && [ "$layer" = plugin ]; then
			why=$(core_rank "$f" "$name")
		fi
		close='"'
		[ "$kind" = '"' ] || close='>'
		[ -z "$why" ] || echo "$f:$line: include $kind$name$close: $why"
	done
}

# core_rank FILE NAME: why plugin/FILE may not include NAME, or nothing.
core_rank() {
	case ${1#plugin/} in
	stats.c | rule_*.c | eb.c | eb_state.c | stats_core.h | eb_math.h)
		case $2 in internal.h | mechanics.h | schedule.h | top.h)
			echo "a rule is pure: it includes no plugin state" ;;
		esac ;;
	dispatch.c | finalize.c | eb_fit.c | mechanics.h)
		case $2 in schedule.h | top.h)
			echo "mechanics sit below the schedules" ;;
		esac ;;
	sched_*.c | schedule.h)
		case $2 in top.h)
			echo "a schedule sits below the top" ;;
		esac ;;
	esac
}

# A schedule calls no other schedule and nothing of the top.
check_schedules() {
	for f in plugin/sched_*.c; do
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
	mkdir -p "$t/include/v05" "$t/shm" "$t/plugin" \
		"$t/internal/v05-internal" "$t/tests/util"
	echo '#include "v05/a.h"' >"$t/include/v05.h"
	echo '#include <stdint.h>' >"$t/include/v05/a.h"
	echo '#include "b.h"' >>"$t/include/v05/a.h"
	: >"$t/include/v05/b.h"
	printf '#include "v05/a.h"\n' >"$t/shm/s.h"
	printf '#include "s.h"\n#include "v05.h"\n' >"$t/shm/s.c"
	printf '#include "../shm/s.h"\n' >"$t/plugin/p.h"
	printf '#include "p.h"\n#include "../shm/s.h"\n' >"$t/plugin/p.c"
	for h in internal mechanics schedule top stats_core; do : >"$t/plugin/$h.h"; done
	printf '#include "stats_core.h"\n' >"$t/plugin/stats.c"
	printf '#include "mechanics.h"\n' >"$t/plugin/dispatch.c"
	printf '#include "schedule.h"\nconst struct v05__schedule v05__sched_a = {\n' \
		>"$t/plugin/sched_a.c"
	printf '#include "../../shm/s.h"\n#include "../../plugin/p.h"\n' \
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
	plugin/stats.c|"internal.h"
	plugin/dispatch.c|"schedule.h"
	plugin/sched_a.c|"top.h"
	EOF
	# A schedule calling the top, or another schedule.
	for call in 'v05__schedule_progress(p, b);' 'v05__sched_b.progress(p, b);'; do
		cp "$t/plugin/sched_a.c" "$t/saved"
		echo "$call" >>"$t/plugin/sched_a.c"
		if sh "$me" "$t" </dev/null >/dev/null; then
			echo "self-test: plugin/sched_a.c with $call passes"
			exit 1
		fi
		mv "$t/saved" "$t/plugin/sched_a.c"
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
