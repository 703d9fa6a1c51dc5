#!/usr/bin/env bash
# How big a submission from BASE (the last landed commit) to HEAD would be.
# A session's submission is refused whole above 512 MiB packed or 256 MiB of
# diff text (a file added and removed again counts twice): session 10's was,
# and none of its work landed. Run this before stopping.
set -euo pipefail
base=${1:?usage: scripts/submission-size.sh BASE_COMMIT}
echo "packed:    $(git rev-list --objects "$base"..HEAD | git pack-objects --stdout -q | wc -c) bytes (limit 536870912)"
echo "diff text: $(git log -p --binary "$base"..HEAD | wc -c) bytes (limit 268435456)"
echo "largest files added or changed:"
git rev-list --objects "$base"..HEAD | git cat-file --batch-check='%(objecttype) %(objectsize) %(rest)' |
  awk '$1=="blob"{print $2, $3}' | sort -rn | head -5
