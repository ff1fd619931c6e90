#!/bin/sh
# SPDX-License-Identifier: MIT
# The library exports exactly the functions libv05.map lists, each in the
# version node the map lists it in, and every public header's V05_API function is among
# them (a function declared but not exported, or exported but not listed,
# fails).
#   check_symbols.sh LIBRARY MAP INCLUDE_DIR
set -eu
lib=$1 map=$2 inc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Listed: the names between "global:" and "local:" of every node.
sed -n '/global:/,/local:/p' "$map" | sed -n 's/^[[:space:]]*\(v05_[a-z0-9_]*\);$/\1/p' |
	sort >"$tmp/listed"
# Exported: defined dynamic symbols, with their version.
nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sort >"$tmp/exported_v"
sed 's/@.*//' "$tmp/exported_v" | sort >"$tmp/exported"
# Declared: V05_API functions of the public headers.
grep -ho '^V05_API [^(]*(' "$inc"/v05.h "$inc"/v05/*.h |
	sed 's/($//; s/.*[ *]\(v05_[a-z0-9_]*\)$/\1/' | sort -u >"$tmp/declared"

fail=0
if ! cmp -s "$tmp/listed" "$tmp/exported"; then
	echo "check_symbols: exported and listed differ (< listed, > exported):"
	diff "$tmp/listed" "$tmp/exported" || true
	fail=1
fi
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
	echo "check_symbols: declared and exported differ (< declared, > exported):"
	diff "$tmp/declared" "$tmp/exported" || true
	fail=1
fi
# Each symbol in the node the map lists it in: "name@@NODE" both ways.
awk '/^V05_[0-9.]+ *\{/ { node = $1 }
     /^[[:space:]]*v05_[a-z0-9_]*;$/ { gsub(/[[:space:];]/, ""); print $0 "@@" node }' \
	"$map" | sort >"$tmp/listed_v"
if ! cmp -s "$tmp/listed_v" "$tmp/exported_v"; then
	echo "check_symbols: a symbol's version node differs (< map, > library):"
	diff "$tmp/listed_v" "$tmp/exported_v" || true
	fail=1
fi
[ $fail -eq 0 ] && echo "check_symbols: $(wc -l <"$tmp/listed") symbols, listed = exported = declared"
exit $fail
