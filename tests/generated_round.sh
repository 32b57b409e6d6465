#!/usr/bin/env bash
# A long round of generated cases, one seed at a time, so that a failing case does not
# end the round (docs/reliability.md, "Generated notebooks"):
#
#     tests/generated_round.sh FIRST_SEED COUNT OUT_FILE [ACTIONS_PER_CASE]
#
# Each seed appends a line to OUT_FILE: "SEED ok generated: {totals}" or "SEED FAIL
# ...", and a failing case's whole output goes to OUT_FILE.SEED.log. Run from a
# checkout whose environment has the test extra installed.
set -u
cd "$(dirname "$0")/.."
first=$1 count=$2 out=$3 per_case=${4:-12}
for seed in $(seq "$first" $((first + count - 1))); do
  said=$(timeout 1200 python -m pytest tests/test_generated.py -n0 -q -s \
    --generated-seed "$seed" --generated-per-case "$per_case" --generated-no-shrink \
    -W ignore::pytest.PytestUnraisableExceptionWarning -p no:cacheprovider 2>&1)
  if echo "$said" | grep -q "1 passed"; then
    echo "$seed ok $(echo "$said" | grep '^generated: {')" >> "$out"
  else
    echo "$seed FAIL $(echo "$said" | grep -E '^generated: seed' -A1 | tail -1 | cut -c1-800)" >> "$out"
    echo "$said" > "$out.$seed.log"
  fi
done
