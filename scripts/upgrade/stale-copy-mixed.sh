#!/usr/bin/env bash
# A node restored from an older copy without --restored, in a cluster half-way through an
# upgrade: node 1 runs NEW, one peer NEW and one OLD (OLD_PEER, 0 or 2; default 2). The NEW peer
# saw a later run of node 1 than the copy's, so node 1 must be refused (StaleCopy) and exit 75,
# then start restored and catch up; no acknowledged message lost.
# RESTART_WITH=old restarts the refused node with OLD instead (a rollback of the refused node:
# the older build honours the restored marker the newer one wrote).
# Usage: OLD=… NEW=… [OLD_PEER=2] [RESTART_WITH=new|old] scripts/upgrade/stale-copy-mixed.sh [workdir]
set -u
OLD=${OLD:?old iggy-server binary} NEW=${NEW:?new iggy-server binary} OLD_PEER=${OLD_PEER:-2} RESTART_WITH=${RESTART_WITH:-new}
W=${1:-/tmp/upg/stale-$OLD_PEER-$RESTART_WITH}
rm -rf "$W" && mkdir -p "$W" && : > "$W/findings" && : > "$W/acked" && : > "$W/failed"
. "$(dirname "$0")/cluster-lib.sh"
trap 'touch "$W/stop-load"; for p in "${PIDS[@]}"; do kill -TERM $p 2>/dev/null; done; wait' EXIT
NEW_PEER=$((2 - OLD_PEER))
make_config
start_node $OLD_PEER old; start_node 1 new; start_node $NEW_PEER new
wait_healthy 120 || exit 1
cli_at 0 stream create s1; cli_at 0 topic create s1 t1 3 none
start_load; sleep 4
stop_node 1; cp -a "$W/node-1" "$W/copy-1"; log "copied node 1"
start_node 1 new; wait_healthy 60; sleep 4
stop_node 1
rm -rf "$W/node-1"; cp -a "$W/copy-1" "$W/node-1"; log "restored node 1 from the older copy; starting it without --restored"
start_node 1 new
for _ in $(seq 60); do kill -0 "${PIDS[1]}" 2>/dev/null || break; sleep 0.5; done
if kill -0 "${PIDS[1]}" 2>/dev/null; then
  echo "FINDING: the stale copy of node 1 still runs after 30 s (not refused)" | tee -a "$W/findings"; stop_node 1
else
  wait "${PIDS[1]}"; rc=$?; log "stale copy of node 1 exited with code $rc"
  [ "$rc" = 75 ] || echo "FINDING: stale copy exit code $rc, expected 75" | tee -a "$W/findings"
fi
ls "$W/node-1/restored.pending" >/dev/null 2>&1 && log "restored.pending written" || echo "FINDING: no restored.pending" | tee -a "$W/findings"
log "StaleCopy lines:"; grep -h StaleCopy "$W"/node-*.log | cut -c1-300
start_node 1 "$RESTART_WITH"
for _ in $(seq 120); do grep -q 'restored node caught up' "$W/node-1.log" && break; sleep 0.5; done
grep -h 'restored node caught up' "$W/node-1.log" | cut -c1-200 || echo "FINDING: node 1 did not catch up in 60 s" | tee -a "$W/findings"
wait_healthy 60; sleep 3
stop_load; sleep 2
for p in 0 1 2; do cli_at $NEW_PEER message poll --offset 0 -m 1000000 s1 t1 $p | grep -o 'load-[0-9]*' | sed "s/^/$p /" >> "$W/read"; done
sort "$W/read" | uniq -d > "$W/duplicates"; sort "$W/acked" > "$W/acked.sorted"; sort -u "$W/read" > "$W/read.sorted"
comm -23 "$W/acked.sorted" "$W/read.sorted" > "$W/lost"
log "acked $(wc -l < "$W/acked"), read $(wc -l < "$W/read"), duplicated $(wc -l < "$W/duplicates"), lost $(wc -l < "$W/lost"), failed sends $(wc -l < "$W/failed")"
[ -s "$W/lost" ] && echo "FINDING: acknowledged messages lost" | tee -a "$W/findings"
[ -s "$W/duplicates" ] && echo "FINDING: duplicated messages" | tee -a "$W/findings"
for n in 0 1 2; do stop_node $n; done
trap - EXIT
for n in 0 1 2; do (cd "$W/node-$n" && find streams -type f ! -name 'view.*' | sort | xargs md5sum) > "$W/md5-$n"; done
for n in 1 2; do diff "$W/md5-0" "$W/md5-$n" >/dev/null && log "node $n streams/ (view.* aside) identical to node 0" || echo "FINDING: node $n streams/ differ from node 0" | tee -a "$W/findings"; done
log "### refusals and errors"; refusals
log "### findings"; cat "$W/findings"
