#!/usr/bin/env bash
# A long round of the oracle on generated notebooks, one seed at a time (docs/reliability.md,
# "The oracle"):
#
#     tests/oracle_round.sh FIRST_SEED COUNT OUT_FILE [ACTIONS]
#
# Each seed appends a line to OUT_FILE: "SEED equal ..." or "SEED DIFFERS ...", and a
# differing case's whole output goes to OUT_FILE.SEED.log. Run from a checkout whose
# environment has the test extra installed.
set -u
cd "$(dirname "$0")/.."
first=$1 count=$2 out=$3 actions=${4:-3}
for seed in $(seq "$first" $((first + count - 1))); do
  said=$(timeout 1200 python -m pytest tests/test_oracle.py -n0 -q -s -k generated \
    --oracle-seed "$seed" --oracle-actions "$actions" -p no:cacheprovider 2>&1)
  if echo "$said" | grep -q "passed"; then
    echo "$seed equal $(echo "$said" | grep -m1 '^oracle: ' | cut -c1-600)" >> "$out"
  else
    echo "$seed DIFFERS $(echo "$said" | grep -m1 -A3 'AssertionError: seed' | tr '\n' ' ' | cut -c1-800)" >> "$out"
    echo "$said" > "$out.$seed.log"
  fi
done
