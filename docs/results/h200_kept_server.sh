#!/usr/bin/env bash
# One H200, device call 1 of the kept fork server (issue #15), the code of the commit that adds
# this file (run from its root). qwen3-1.7b, seq 512, bf16, checkpointing off.
#  1. plain TRL 4x1 (no tracetui);
#  2. the second built-in sweep (effective batch 16, 2x8,4x4,8x2,16x1, 20 steps) with
#     TRACETUI_KEEP_SERVER=0: each command its own fork server, as before;
#  3. the same sweep, the first command to keep a server (it starts it and imports);
#  4. the same sweep again: its trials forked from the server command 3 kept;
#  5. the first built-in sweep (1x4,2x2,4x1, two repeats, 30 steps), from the same kept server.
# Everything goes to R; after each step R (with the event logs) is packed into $OUT/kept1.tar.gz.
#   R=/tmp/kept1 bash docs/results/h200_kept_server.sh
set -u
R=${R:-/tmp/kept1}; mkdir -p "$R"
OLD=unused . docs/results/h200_head_start_arms.sh
save() { cp -r /tmp/hs_* "$R/" 2>/dev/null; ls -la /tmp/tracetui-*/ > "$R/servers.txt" 2>&1; tar -czf "$OUT/kept1.tar.gz" -C "$R" .; }
EB16="--effective-batch 16 --splits 2x8,4x4,8x2,16x1 --repeats 1 --steps 20"
plain 4x1; save
TRACETUI_KEEP_SERVER=0 arm own_eb16 "$NEW" $M $EB16; save
arm kept_first_eb16 "$NEW" $M $EB16; save
arm kept_eb16 "$NEW" $M $EB16; save
arm kept_first_sweep "$NEW" $M --steps 30; save
