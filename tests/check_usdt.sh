#!/bin/sh
# SPDX-License-Identifier: MIT
# The built library carries every USDT probe of plugin/mechanics/probes.h
# in its ELF notes (provider v05), with its arguments' locations.
#   check_usdt.sh LIBRARY enabled|disabled
set -eu
lib=$1
if [ "$2" != enabled ]; then
	echo "check_usdt: built with -Dusdt=disabled; skipped"
	exit 77
fi
notes=$(readelf --notes "$lib")
fail=0
for probe in reward_applied reward_rejected decision final halt; do
	# A stapsdt note: "Provider: v05", "Name: <probe>", "Arguments: ...".
	if ! printf '%s\n' "$notes" | grep -A3 'Provider: v05' |
		grep -A2 "Name: $probe\$" | grep -q 'Arguments: '; then
		echo "check_usdt: probe v05:$probe missing from $lib"
		fail=1
	fi
done
[ $fail -eq 0 ] && echo "check_usdt: 5 probes (provider v05) in $lib"
exit $fail
