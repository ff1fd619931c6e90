#!/bin/sh
# Model-check tests/doorbell.pml with spin: the protocol must verify with no
# error, and each deliberately broken variant must be caught.
set -eu
model=$1
command -v spin >/dev/null 2>&1 || { echo "spin not installed: skipped"; exit 77; }
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$model" "$work/model.pml"
cd "$work"

check() { # variant-flag expected-errors
  rm -f pan pan.* model.pml.trail
  if [ -n "$1" ]; then spin "$1" -a model.pml >/dev/null; else spin -a model.pml >/dev/null; fi
  $cc -O2 -DSAFETY -o pan pan.c 2>/dev/null
  out=$(./pan -m100000 2>&1)
  errors=$(printf '%s\n' "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p' | head -n1)
  states=$(printf '%s\n' "$out" | sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' | head -n1)
  echo "variant '${1:-correct}': errors $errors, states stored $states"
  if [ "$2" = 0 ] && [ "$errors" != 0 ]; then
    printf '%s\n' "$out"; exit 1
  fi
  if [ "$2" = some ] && [ "$errors" = 0 ]; then
    echo "spin did not catch the broken variant"; exit 1
  fi
}
check "" 0
check -DNO_RECHECK some
check -DWORD_LATE some
echo "doorbell model: ok"
