#!/usr/bin/env bash
# Rolling upgrade of a three-node cluster from OLD to NEW under a light CLI producer load, with
# real processes: README's order (highest id first), back to OLD lowest id first, NEW lowest id
# first, a rolling restart on NEW, one node rolled back to OLD and up again. Between steps each
# node must report three Healthy nodes; at the end every acknowledged message is read back once
# and each node's streams/ files are compared.
# Usage: OLD=/path/old/iggy-server NEW=/path/new/iggy-server scripts/upgrade/cluster.sh [workdir]
set -u
OLD=${OLD:?old iggy-server binary} NEW=${NEW:?new iggy-server binary}
W=${1:-/tmp/upg/cluster}
rm -rf "$W" && mkdir -p "$W" && : > "$W/findings" && : > "$W/acked" && : > "$W/failed"
. "$(dirname "$0")/cluster-lib.sh"
trap 'touch "$W/stop-load"; for p in "${PIDS[@]}"; do kill -TERM $p 2>/dev/null; done; wait' EXIT
make_config
for n in 0 1 2; do start_node $n old; done
wait_healthy 120 || exit 1
cli_at 0 stream create s1; cli_at 0 topic create s1 t1 3 none
start_load; sleep 5
swap() { # id which
  stop_node "$1"; sleep 1; start_node "$1" "$2"; wait_linked "$1" 60; wait_healthy 90; sleep 3
  log "acked so far: $(wc -l < "$W/acked"), failed: $(wc -l < "$W/failed")"
}
log "### upgrade in README's order (highest id first)"; for n in 2 1 0; do swap $n new; done
log "### rollback of every node, lowest id first";     for n in 0 1 2; do swap $n old; done
log "### upgrade lowest id first";                     for n in 0 1 2; do swap $n new; done
log "### rolling restart on the new build";             for n in 2 1 0; do swap $n new; done
log "### node 1 rolled back to the old build, then up again"; swap 1 old; swap 1 new
stop_load; sleep 2
log "### read back"
for p in 0 1 2; do
  cli_at 0 message poll --offset 0 -m 1000000 s1 t1 $p | grep -o 'load-[0-9]*' | sed "s/^/$p /" >> "$W/read"
done
sort "$W/read" | uniq -d > "$W/duplicates"
sort "$W/acked" > "$W/acked.sorted"; sort -u "$W/read" > "$W/read.sorted"
comm -23 "$W/acked.sorted" "$W/read.sorted" > "$W/lost"
log "acked $(wc -l < "$W/acked"), read $(wc -l < "$W/read"), duplicated $(wc -l < "$W/duplicates"), lost $(wc -l < "$W/lost"), failed sends $(wc -l < "$W/failed")"
[ -s "$W/lost" ] && echo "FINDING: acknowledged messages lost: $(head -5 "$W/lost" | tr '\n' ' ')" | tee -a "$W/findings"
[ -s "$W/duplicates" ] && echo "FINDING: duplicated messages: $(head -5 "$W/duplicates" | tr '\n' ' ')" | tee -a "$W/findings"
for n in 0 1 2; do stop_node $n; done
trap - EXIT
# view.0/view.1 hold each replica's own view state (its vote), so they differ between nodes.
log "### streams/ files per node (view.* aside)"
for n in 0 1 2; do (cd "$W/node-$n" && find streams -type f ! -name 'view.*' | sort | xargs md5sum) > "$W/md5-$n"; done
for n in 1 2; do diff "$W/md5-0" "$W/md5-$n" > "$W/md5-diff-0-$n" && log "node $n streams/ identical to node 0 ($(wc -l < "$W/md5-0") files)" || { echo "FINDING: node $n streams/ differ from node 0"; cat "$W/md5-diff-0-$n"; } | tee -a "$W/findings"; done
for n in 0 1 2; do IGGY_CONFIG_PATH=$CONF "$NEW" verify --path "$W/node-$n" | tail -1; done
log "### refusals and errors in the logs"; refusals
log "### WARN lines (distinct, timestamps cut)"; grep -h WARN "$W"/node-*.log | cut -c29- | sed 's/[0-9]\+/N/g' | sort | uniq -c | sort -rn | head -40
log "### findings"; cat "$W/findings"
