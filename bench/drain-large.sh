#!/usr/bin/env bash
# Large persistent messages through a broker in a memory cgroup: publish N
# persistent messages of SIZE bytes with confirms (railmq-perf), stop and
# restart the broker (so that every message is read back from the store),
# then drain them with railmq-perf --drain, and report the drain rate, the
# broker's VmHWM in each phase and the cgroup's peak (page cache included).
# Needs root and a memory cgroup (v2, or v1 as on hybrid hosts).
#
#   bash bench/drain-large.sh                # the working tree's build
#   BIN=/path/to/railmq bash bench/drain-large.sh
#   N=200 SIZE=20971520 LIMIT=1073741824 ENGINE=frames PREFETCH=2 bash bench/drain-large.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${N:-200}
SIZE=${SIZE:-$((20 << 20))}
LIMIT=${LIMIT:-$((1 << 30))}
ENGINE=${ENGINE:-frames}
PREFETCH=${PREFETCH:-2}
PORT=${PORT:-25790}
work=$(mktemp -d /tmp/railmq-drain.XXXXXX)
if [ -z "${BIN:-}" ]; then
	BIN=$work/railmq
	$GO build -o "$BIN" ./cmd/railmq
fi
$GO build -o "$work/perf" ./cmd/railmq-perf

# The cgroup: v2 where the memory controller is there, else v1's.
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
	cg=/sys/fs/cgroup/railmq-drain-$$
	grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory >/sys/fs/cgroup/cgroup.subtree_control
	mkdir "$cg"
	echo "$LIMIT" >"$cg/memory.max"
	peakfile=$cg/memory.peak
	oom() { awk '$1 == "oom_kill" {print $2}' "$cg/memory.events"; }
else
	own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
	cg=/sys/fs/cgroup/memory${own}/railmq-drain-$$
	mkdir "$cg"
	echo "$LIMIT" >"$cg/memory.limit_in_bytes"
	peakfile=$cg/memory.max_usage_in_bytes
	oom() { awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control"; }
fi
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rmdir "$cg" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

start() {
	sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$BIN" --listen 127.0.0.1:$PORT \
		--data-dir "$work/data" --log-level warn 2>>"$work/broker.log" &
	pid=$!
	for _ in $(seq 1 600); do
		(echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return
		kill -0 "$pid" 2>/dev/null || { echo "broker exited at start (OOM kills: $(oom))"; tail -5 "$work/broker.log"; exit 1; }
		sleep 0.1
	done
	echo "broker not listening"; exit 1
}
stop() {
	kill "$pid"
	wait "$pid" || { echo "broker exited with $? (OOM kills: $(oom))"; exit 1; }
	pid=
}
hwm() { awk '/VmHWM/ {printf "%d MiB", $2/1024}' /proc/$pid/status; }
perf() { "$work/perf" --engine "$ENGINE" --uri amqp://guest:guest@127.0.0.1:$PORT/ --persistent --size "$SIZE" --json "$@" 2>"$work/perf.err"; }
field() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }

start
t0=$(date +%s.%N)
perf --consumers 0 --pmessages "$N" --confirm 4 --broker-pid "$pid" >"$work/pub.json" || { echo "publish failed (OOM kills: $(oom))"; tail -3 "$work/perf.err"; exit 1; }
t1=$(date +%s.%N)
echo "published $(field confirmed <"$work/pub.json") x $SIZE B in $(echo "$t1 - $t0" | bc) s; broker VmHWM $(hwm)"
stop
start
echo "restarted: broker VmHWM $(hwm)"
perf --producers 0 --consumers 1 --predeclared --drain --prefetch "$PREFETCH" --broker-pid "$pid" >"$work/drain.json" || { echo "drain failed (OOM kills: $(oom))"; tail -3 "$work/perf.err"; exit 1; }
consumed=$(field consumed <"$work/drain.json")
rate=$(field drain_rate <"$work/drain.json")
echo "drained $consumed: $rate msg/s = $(echo "$rate * $SIZE / 1048576" | bc) MiB/s; broker VmHWM $(hwm), errors $(field errors <"$work/drain.json")"
echo "cgroup peak $(($(cat "$peakfile") >> 20)) MiB of $((LIMIT >> 20)) MiB (page cache included); OOM kills $(oom)"
stop
