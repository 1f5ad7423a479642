#!/usr/bin/env bash
# Single-node upgrade and rollback with real processes and the official CLI.
# Usage: OLD=/path/old/iggy-server NEW=/path/new/iggy-server scripts/upgrade/single-node.sh [workdir]
# Writes data with OLD, SIGTERMs it, starts NEW on the same directory, reads everything back,
# writes more with NEW, stops it, starts OLD again (rollback) and reads back once more.
# Ports 18090 (TCP) and 13000 (HTTP); QUIC off, so it does not collide with other servers.
set -u
OLD=${OLD:?old iggy-server binary} NEW=${NEW:?new iggy-server binary}
W=${1:-/tmp/upg/single}
IGGY=${IGGY:-$HOME/.cargo/bin/iggy}
rm -rf "$W" && mkdir -p "$W"
export IGGY_SYSTEM_PATH=$W/data IGGY_TCP_ADDRESS=127.0.0.1:18090 IGGY_HTTP_ADDRESS=127.0.0.1:13000 IGGY_QUIC_ENABLED=false
cli() { "$IGGY" --tcp-server-address 127.0.0.1:18090 -u iggy -p iggy "$@" 2>&1 | grep -v -e keyring -e "^Executing"; return "${PIPESTATUS[0]}"; }
start() { # $1 binary, $2 log name
  "$1" --with-default-root-credentials >"$W/$2.log" 2>&1 & PID=$!
  for _ in $(seq 100); do cli ping >/dev/null 2>&1 && return 0; sleep 0.2; kill -0 $PID 2>/dev/null || break; done
  echo "server $2 did not come up"; tail -20 "$W/$2.log"; return 1
}
stop() { kill -TERM $PID; wait $PID; echo "exit code of $1: $?"; }
readback() { # $1 label
  echo "--- readback $1"
  cli stream list; cli topic list s1; cli user list; cli pat list; cli consumer-group list s1 t1
  cli consumer-offset get c1 s1 t1 0
  for p in 0 1; do echo "partition $p: $(cli message poll --offset 0 -m 1000 s1 t1 $p 2>&1 | grep -c 'msg-') messages"; done
  "$IGGY" --tcp-server-address 127.0.0.1:18090 --token "$(cat "$W/pat")" me >/dev/null 2>&1 && echo "PAT login ok" || echo "PAT login FAILED"
  if "$IGGY" --tcp-server-address 127.0.0.1:18090 -u alice -p alice-pw me >/dev/null 2>&1; then echo "alice login ok"; else echo "alice login FAILED"; fi
}
start "$OLD" old-1 || exit 1
cli stream create s1; cli topic create s1 t1 2 none; cli topic create s1 t2 1 none 1h
cli user create alice alice-pw -g m_srv
cli pat create tok | tee "$W/pat.out"; grep -o '[A-Za-z0-9_-]\{20,\}' "$W/pat.out" | tail -1 > "$W/pat"
cli consumer-group create s1 t1 g1
for i in $(seq 1 50); do echo "msg-old-$i"; done | cli message send -p 0 s1 t1
for i in $(seq 1 30); do echo "msg-old-p2-$i"; done | cli message send -p 1 s1 t1
cli consumer-offset set c1 s1 t1 0 17
readback old
stop old-1
start "$NEW" new-1 || exit 1
readback new-after-old
for i in $(seq 1 20); do echo "msg-new-$i"; done | cli message send -p 0 s1 t1
cli consumer-offset set c1 s1 t1 0 60
stop new-1
start "$OLD" old-2 || { echo "ROLLBACK: old build did not start"; exit 1; }
readback old-after-new
stop old-2
ls -la "$W/data"
echo "--- WARN/ERROR lines"; grep -E 'WARN|ERROR' "$W"/*.log
