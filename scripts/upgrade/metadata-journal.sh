#!/usr/bin/env bash
# A single node's metadata journal grown long under the previous build (topics created and
# deleted back to back by several CLI loops, checkpoint policy 16 ops), then the new build on
# that directory: how many ops it replays, and whether it checkpoints under the same churn.
# Usage: OLD=… NEW=… scripts/upgrade/metadata-journal.sh [workdir]
set -u
OLD=${OLD:?} NEW=${NEW:?}
W=${1:-/tmp/upg/metadata-journal}
IGGY=${IGGY:-$HOME/.cargo/bin/iggy}
rm -rf "$W" && mkdir -p "$W"
export IGGY_SYSTEM_PATH=$W/data IGGY_TCP_ADDRESS=127.0.0.1:18090 IGGY_HTTP_ADDRESS=127.0.0.1:13000 IGGY_QUIC_ENABLED=false IGGY_SYSTEM_CHECKPOINT_JOURNAL_OPS=16
cli() { "$IGGY" --tcp-server-address 127.0.0.1:18090 -u iggy -p iggy "$@" >/dev/null 2>&1; }
start() { "$1" --with-default-root-credentials >"$W/$2.log" 2>&1 & PID=$!; for _ in $(seq 100); do cli ping && return 0; sleep 0.2; done; echo "no start"; exit 1; }
churn() { # seconds
  local until=$((SECONDS + $1)) c loops=()
  for c in 1 2 3 4; do
    ( i=0; while [ $SECONDS -lt $until ]; do i=$((i + 1)); cli topic create s1 "t-$c-$i" 2 none && cli topic delete s1 "t-$c-$i"; done; echo "loop $c: $i creates" ) &
    loops+=($!)
  done
  wait "${loops[@]}"
}
journal() { ls -la "$W/data/metadata" | awk '{print $5, $9}' | grep -v '^ *$' | tr '\n' ' '; echo; }
start "$OLD" old; cli stream create s1
churn 20; echo "old build after 20 s of churn: $(journal)"
kill -TERM $PID; wait $PID
start "$NEW" new
grep -h 'metadata: checkpoint at op' "$W/new.log" | cut -c29-
churn 20; echo "new build after 20 s of churn: $(journal)"
kill -TERM $PID; wait $PID
grep -h -E 'WARN|ERROR' "$W"/*.log | cut -c29- | sort | uniq -c | head
