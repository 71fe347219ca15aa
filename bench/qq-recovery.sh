#!/usr/bin/env bash
# A single-node quorum queue's recovery after kill -9 with a backlog: fill
# one quorum queue with N persistent messages of SIZE bytes (railmq-perf,
# PRODUCERS publishers with confirms, no consumer), kill the broker with
# SIGKILL, start it again on the same data directory, and time, from the
# new process's start, when it accepts an AMQP connection and when a
# consumer gets its first message (bench/qq-first.go). Reports one JSON
# line per run on stdout: the fill rate, the data directory's size, the
# filling broker's VmHWM (read just before the kill), the restarted one's
# VmHWM at its first delivery and after DRAIN_S seconds more (/proc/PID/
# status), and the two times. The data directory is deleted afterwards.
#
#   bash bench/qq-recovery.sh                   # N=100000
#   N=1000000 bash bench/qq-recovery.sh
#   BIN=/path/to/railmq N=1000000 RUNS=3 bash bench/qq-recovery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${N:-100000}
SIZE=${SIZE:-1024}
PRODUCERS=${PRODUCERS:-4}
RUNS=${RUNS:-1}
PORT=${PORT:-25791}
QUEUE=${QUEUE:-qqrec}
work=$(mktemp -d "${TMPDIR:-/tmp}/railmq-qqrec.XXXXXX")
if [ -z "${BIN:-}" ]; then
	BIN=$work/railmq
	$GO build -trimpath -ldflags=-s -o "$BIN" ./cmd/railmq
fi
$GO build -o "$work/perf" ./cmd/railmq-perf
$GO build -o "$work/first" bench/qq-first.go
pid=
cleanup() {
	if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
say() { echo "qq-recovery: $*" >&2; }
hwm() { awk '/^VmHWM/{print $2}' "/proc/$1/status"; }
start() {
	"$BIN" --listen 127.0.0.1:$PORT --data-dir "$work/data" --log-level warn 2>>"$work/broker.log" &
	pid=$!
}
wait_listening() {
	for _ in $(seq 1 6000); do
		(echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return
		kill -0 "$pid" 2>/dev/null || { say "broker exited"; tail -5 "$work/broker.log" >&2; exit 1; }
		sleep 0.1
	done
	say "broker never listened"
	exit 1
}
uri=amqp://guest:guest@127.0.0.1:$PORT/
per=$(((N + PRODUCERS - 1) / PRODUCERS))
for ((run = 1; run <= RUNS; run++)); do
	rm -rf "$work/data"
	start
	wait_listening
	say "run $run: filling $QUEUE with $((per * PRODUCERS)) x $SIZE B (pid $pid)"
	"$work/perf" --uri "$uri" --json --broker-pid "$pid" --producers "$PRODUCERS" --consumers 0 --pmessages "$per" \
		--size "$SIZE" --persistent --confirm 256 --queue-type quorum --queue-prefix "$QUEUE" --queues 1 \
		>"$work/fill.json" 2>>"$work/perf.log"
	fill=$(tail -1 "$work/fill.json")
	hwm_fill=$(hwm "$pid")
	disk=$(du -sB1 "$work/data" | cut -f1) # blocks in use: Badger preallocates its files
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	t0=$(date +%s%N)
	start
	"$work/first" -uri "$uri" -queue "$QUEUE-1" -start "$t0" >"$work/first.json"
	hwm_first=$(hwm "$pid")
	sleep "${DRAIN_S:-5}"
	hwm_after=$(hwm "$pid")
	kill -TERM "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	jq -nc --argjson n "$((per * PRODUCERS))" --argjson size "$SIZE" --argjson fill "$fill" --argjson first "$(cat "$work/first.json")" \
		--argjson hf "$hwm_fill" --argjson h1 "$hwm_first" --argjson h2 "$hwm_after" --argjson disk "$disk" \
		'{messages:$n, size:$size, fill_rate:$fill.publish_rate, fill_confirmed:$fill.confirmed, data_dir_bytes:$disk,
		  vm_hwm_fill_kib:$hf, listen_s:$first.listen_s, first_message_s:$first.first_s,
		  vm_hwm_restart_first_kib:$h1, vm_hwm_restart_later_kib:$h2}'
	rm -rf "$work/data"
done
