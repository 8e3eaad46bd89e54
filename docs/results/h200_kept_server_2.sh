#!/usr/bin/env bash
# One H200, device call 2 of the kept fork server (issue #15), the code of the commit that adds
# this file (run from its root). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. plain TRL 4x1 (no tracetui);
#  2. a short command on the tiny preset: the session's first, it starts the kept server;
#  3. the second built-in sweep (effective batch 16, 2x8,4x4,8x2,16x1, 20 steps) forked from
#     the kept server; then with TRACETUI_KEEP_SERVER=0 (its own server, importing); then kept
#     again: whether the steps differ either way, in an order that cancels the host's drift.
# Everything goes to R; after each step R (with the event logs) is packed into $OUT/kept2.tar.gz.
#   R=/tmp/kept2 bash docs/results/h200_kept_server_2.sh
set -u
R=${R:-/tmp/kept2}; mkdir -p "$R"
OLD=unused . docs/results/h200_head_start_arms.sh
save() { cp -r /tmp/hs_* "$R/" 2>/dev/null; tar -czf "$OUT/kept2.tar.gz" -C "$R" .; }
EB16="--effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
plain 4x1; save
python3 -m tracetui --export json -o "$R/first.json" --steps 4 --warmup 1 --splits 2x2 --effective-batch 4 \
  --repeats 1 --runs-dir /tmp/hs_first 2> "$R/first.err"; save
arm kept_eb16_a "$NEW" $M $EB16; save
TRACETUI_KEEP_SERVER=0 arm own_eb16 "$NEW" $M $EB16; save
arm kept_eb16_b "$NEW" $M $EB16; save
