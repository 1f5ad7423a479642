#!/usr/bin/env bash
# Helpers for scripts/upgrade/cluster.sh: three nodes of one cluster on 127.0.0.1 (TCP 18090-2,
# QUIC 18080-2, HTTP 13000-2, replica plane 18100-2), each started with a chosen binary.
# Source it; W (work dir), OLD and NEW (binaries) must be set.
IGGY=${IGGY:-$HOME/.cargo/bin/iggy}
CONF=$W/cluster.toml
declare -A PIDS BINS
log() { echo "[$(date +%H:%M:%S)] $*"; }
make_config() {
  sed -e 's/tcp = 809\([0-2]\)/tcp = 1809\1/; s/quic = 808\([0-2]\)/quic = 1808\1/; s/http = 300\([0-2]\)/http = 1300\1/; s/tcp_replica = 810\([0-2]\)/tcp_replica = 1810\1/' \
    "$(dirname "${BASH_SOURCE[0]}")/../../config/cluster-3-nodes.toml" > "$CONF"
}
cli_at() { local n=$1; shift; "$IGGY" --tcp-server-address 127.0.0.1:1809$n -u iggy -p iggy "$@" 2>&1 | grep -v -e keyring -e '^Executing'; return "${PIPESTATUS[0]}"; }
start_node() { # id which(old|new) [extra flags]
  local n=$1 which=$2; shift 2
  local bin; if [ "$which" = old ]; then bin=$OLD; else bin=$NEW; fi
  echo "===== start $which $(date +%H:%M:%S.%N) $*" >> "$W/node-$n.log"
  IGGY_CONFIG_PATH=$CONF IGGY_SYSTEM_PATH=$W/node-$n "$bin" --replica-id "$n" --with-default-root-credentials "$@" >> "$W/node-$n.log" 2>&1 &
  PIDS[$n]=$! BINS[$n]=$which
  log "node $n started ($which, pid ${PIDS[$n]})"
}
stop_node() { # id
  local n=$1 rc
  kill -TERM "${PIDS[$n]}"; wait "${PIDS[$n]}"; rc=$?
  echo "===== stopped rc=$rc $(date +%H:%M:%S.%N)" >> "$W/node-$n.log"
  log "node $n stopped (${BINS[$n]}), exit code $rc"
  [ "$rc" = 0 ] || echo "FINDING: node $n exit code $rc" | tee -a "$W/findings"
}
# Waits until every node answers `cluster metadata` with three Healthy nodes; prints the table.
wait_healthy() { # deadline seconds
  local deadline=$((SECONDS + ${1:-60})) n ok
  while [ $SECONDS -lt $deadline ]; do
    ok=0
    for n in 0 1 2; do
      [ "$(cli_at $n cluster metadata | grep -c '| healthy')" = 3 ] && ok=$((ok + 1))
    done
    if [ $ok = 3 ]; then log "all three nodes report three Healthy (bins: ${BINS[0]} ${BINS[1]} ${BINS[2]})"; cli_at 0 cluster metadata | grep -E 'node-|Role'; return 0; fi
    sleep 1
  done
  echo "FINDING: not all Healthy after ${1:-60}s (bins: ${BINS[0]} ${BINS[1]} ${BINS[2]})" | tee -a "$W/findings"
  for n in 0 1 2; do echo "-- via node $n"; cli_at $n cluster metadata | grep -E 'node-'; done
  return 1
}
# Waits until node n's log, since its latest start, names both peers' links admitted (whichever
# side dialed): the CLI's Healthy alone may still reflect the previous process's last ping.
wait_linked() { # id deadline
  local n=$1 deadline=$((SECONDS + ${2:-60})) j missing
  while [ $SECONDS -lt $deadline ]; do
    missing=""
    for j in 0 1 2; do
      [ "$j" = "$n" ] && continue
      awk '/^===== start/ {buf=""} {buf=buf $0 "\n"} END {printf "%s", buf}' "$W/node-$n.log" | grep -q "replica $n: link with replica $j admitted" || missing="$missing $j"
    done
    [ -z "$missing" ] && { log "node $n (${BINS[$n]}) linked with both peers"; return 0; }
    sleep 0.5
  done
  echo "FINDING: node $n (${BINS[$n]}) has no admitted link with replica(s)$missing after ${2:-60}s" | tee -a "$W/findings"
  return 1
}
refusals() { grep -n -E 'StaleCopy|refused|NonZero|Mismatch|panicked|ERROR' "$W"/node-*.log | cut -c1-300; }
# Background producer: each CLI send is one message, through the nodes in turn, to partitions 0-2;
# an acknowledged one (exit 0) is recorded in acked, any other in failed.
start_load() {
  rm -f "$W/stop-load"
  ( i=0
    while [ ! -f "$W/stop-load" ]; do
      i=$((i + 1)); n=$((i % 3)); p=$(((i / 3) % 3))
      if "$IGGY" --tcp-server-address 127.0.0.1:1809$n -u iggy -p iggy message send -p $p s1 t1 "load-$i" >/dev/null 2>&1; then
        echo "$p load-$i" >> "$W/acked"
      else
        echo "$p load-$i via $n" >> "$W/failed"
      fi
      sleep 0.05
    done ) &
  LOAD_PID=$!
}
stop_load() { touch "$W/stop-load"; wait "$LOAD_PID"; log "load stopped: $(wc -l < "$W/acked") acked, $(cat "$W/failed" 2>/dev/null | wc -l) failed"; }
