#!/usr/bin/env bash
# Memory while a dynamic shovel moves a large backlog between two brokers
# (issue 41: "RSS under 256 MiB on each side").
#
# Starts two railmq processes, A and B (each its own data dir and ports),
# fills the durable queue backlog-1 on A with N persistent SIZE-byte
# messages (railmq-perf, confirms), declares backlog-1 on B, then creates a
# dynamic shovel on A's management API (src-uri amqp://, A's local path;
# dest-uri B over TCP; ack-mode on-confirm) and samples both processes'
# VmRSS and both queues' lengths every INTERVAL seconds until B holds N and
# A none. A's VmHWM is reset (/proc/PID/clear_refs) when the shovel
# starts, so each side's peak is the move's. Prints a summary and one JSON
# line; the samples are in $OUT/samples.txt.
#
#   bash bench/shovel-backlog.sh                  # 10,000,000 x 1 KiB
#   N=1000000 SIZE=1024 bash bench/shovel-backlog.sh
#   BIN=/path/to/railmq KEEP=1 OUT=/tmp/sb bash bench/shovel-backlog.sh
#   MODE=drain N=3000000 bash bench/shovel-backlog.sh   # the control: no shovel
#
# Disk: each side holds N*SIZE bytes of bodies plus the store's overhead
# (about 11 GiB each for 10 M x 1 KiB); the data dirs are deleted at the
# end unless KEEP=1. DEBUG=1 serves pprof on A (127.0.0.1:$((PORT+2))) and
# B (127.0.0.1:$((PORT+12))) and saves a heap profile of each mid-move.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${N:-10000000}
SIZE=${SIZE:-1024}
PRODUCERS=${PRODUCERS:-2}
PREFETCH=${PREFETCH:-1000}
INTERVAL=${INTERVAL:-5}
MODE=${MODE:-shovel} # drain: the control, a railmq-perf consumer drains A instead of the shovel
PORT=${PORT:-25810} # A: PORT (AMQP), PORT+1 (management), PORT+2 (pprof); B: PORT+10...
OUT=${OUT:-$(mktemp -d /tmp/railmq-shovel-backlog.XXXXXX)}
mkdir -p "$OUT"
if [ -z "${BIN:-}" ]; then
	BIN=$OUT/railmq
	$GO build -o "$BIN" ./cmd/railmq
fi
$GO build -o "$OUT/perf" ./cmd/railmq-perf

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ "${KEEP:-0}" = 1 ] || rm -rf "$OUT/a" "$OUT/b" "$OUT/railmq" "$OUT/perf"
}
trap cleanup EXIT

start() { # start NAME PORTBASE
	local dbg=()
	[ "${DEBUG:-0}" = 1 ] && dbg=(--debug-listen "127.0.0.1:$(($2 + 2))")
	"$BIN" --listen "127.0.0.1:$2" --management-listen "127.0.0.1:$(($2 + 1))" "${dbg[@]}" \
		--data-dir "$OUT/$1" --log-level warn 2>>"$OUT/$1.log" &
	pids+=($!)
	for _ in $(seq 1 600); do
		(echo >"/dev/tcp/127.0.0.1/$(($2 + 1))") 2>/dev/null && return
		sleep 0.1
	done
	echo "broker $1 not listening"
	exit 1
}
api() { # api METHOD PORTBASE PATH [BODY]
	curl -fsS -u guest:guest -X "$1" -H 'content-type: application/json' \
		${4:+--data "$4"} "http://127.0.0.1:$(($2 + 1))/api$3"
}
qlen() { api GET "$1" /queues/%2F/backlog-1 | jq .messages; }
rss() { awk '/VmRSS/ {print int($2/1024)}' "/proc/$1/status"; }
hwm() { awk '/VmHWM/ {print int($2/1024)}' "/proc/$1/status"; }
du_mib() { du -sm "$OUT/$1" | cut -f1; }

A=$PORT B=$((PORT + 10))
start a $A
apid=${pids[0]}
start b $B
bpid=${pids[1]}
echo "disk before: $(df -h / | awk 'NR==2 {print $4}') free; A pid $apid, B pid $bpid, out $OUT"

# Fill A.
t0=$(date +%s.%N)
"$OUT/perf" --engine frames --uri "amqp://guest:guest@127.0.0.1:$A/" --producers "$PRODUCERS" --consumers 0 \
	--pmessages $((N / PRODUCERS)) --size "$SIZE" --persistent --confirm 1000 --queue-prefix backlog \
	--broker-pid "$apid" --json >"$OUT/publish.json" 2>"$OUT/publish.err"
t1=$(date +%s.%N)
have=$(qlen $A)
echo "published $have x $SIZE B on A in $(echo "$t1 - $t0" | bc) s ($(jq .publish_rate <"$OUT/publish.json") msg/s); A VmRSS $(rss $apid) MiB, VmHWM $(hwm $apid) MiB; A data $(du_mib a) MiB"
[ "$have" -eq $((N / PRODUCERS * PRODUCERS)) ] || { echo "A holds $have, not $N"; exit 1; }
N=$have
api PUT $B /queues/%2F/backlog-1 '{"durable":true}' >/dev/null

# Move A -> B.
echo 5 >"/proc/$apid/clear_refs"
echo 5 >"/proc/$bpid/clear_refs"
shovel='{"value":{"src-protocol":"amqp091","src-uri":"amqp://","src-queue":"backlog-1",'
shovel+='"src-prefetch-count":'$PREFETCH',"dest-protocol":"amqp091",'
shovel+='"dest-uri":"amqp://guest:guest@127.0.0.1:'$B'/","dest-queue":"backlog-1","ack-mode":"on-confirm"}}'
t2=$(date +%s.%N)
if [ "$MODE" = drain ]; then
	# The control: no shovel, a railmq-perf consumer drains A (the same
	# prefetch, acks each message), so that A's figures show what the
	# source's store costs without the shovel.
	"$OUT/perf" --engine frames --uri "amqp://guest:guest@127.0.0.1:$A/" --producers 0 --consumers 1 --predeclared --drain \
		--prefetch "$PREFETCH" --queue-prefix backlog --json >"$OUT/drain.json" 2>"$OUT/drain.err" &
	pids+=($!)
else
	api PUT $A /parameters/shovel/%2F/backlog "$shovel" >/dev/null
fi
echo "t_s a_rss_mib b_rss_mib a_msgs b_msgs" >"$OUT/samples.txt"
profiled=0
while :; do
	sleep "$INTERVAL"
	qa=$(qlen $A) qb=$(qlen $B)
	now=$(date +%s.%N)
	line="$(printf '%.0f' "$(echo "$now - $t2" | bc)") $(rss $apid) $(rss $bpid) $qa $qb"
	echo "$line" >>"$OUT/samples.txt"
	echo "$line"
	if [ "${DEBUG:-0}" = 1 ] && [ $profiled = 0 ] && [ "$qb" -ge $((N / 2)) ]; then
		curl -fsS "http://127.0.0.1:$((A + 2))/debug/pprof/heap" >"$OUT/a.heap"
		curl -fsS "http://127.0.0.1:$((B + 2))/debug/pprof/heap" >"$OUT/b.heap"
		profiled=1
	fi
	[ "$qa" -eq 0 ] && { [ "$MODE" = drain ] || [ "$qb" -ge "$N" ]; } && break
	kill -0 "$apid" && kill -0 "$bpid" || { echo "a broker exited"; exit 1; }
done
t3=$(date +%s.%N)
status=$(api GET $A /shovels/%2F | jq -c '[.[] | {name, state}]')
[ "$MODE" = drain ] || api DELETE $A /parameters/shovel/%2F/backlog >/dev/null
qa=$(qlen $A) qb=$(qlen $B)
secs=$(echo "$t3 - $t2" | bc)
rate=$(echo "$N / $secs" | bc)
a_peak=$(awk 'NR > 1 && $2 > m {m = $2} END {print m + 0}' "$OUT/samples.txt")
b_peak=$(awk 'NR > 1 && $3 > m {m = $3} END {print m + 0}' "$OUT/samples.txt")
echo "moved $N in $secs s: $rate msg/s (sampled every $INTERVAL s, so up to $INTERVAL s slow); shovel $status"
echo "A: VmHWM $(hwm $apid) MiB during the move, sampled VmRSS peak $a_peak MiB, queue $qa; data $(du_mib a) MiB"
echo "B: VmHWM $(hwm $bpid) MiB during the move, sampled VmRSS peak $b_peak MiB, queue $qb; data $(du_mib b) MiB"
jq -nc --argjson n "$N" --argjson size "$SIZE" --argjson secs "$secs" --argjson rate "$rate" \
	--argjson ahwm "$(hwm $apid)" --argjson bhwm "$(hwm $bpid)" --argjson apeak "$a_peak" --argjson bpeak "$b_peak" \
	--argjson qa "$qa" --argjson qb "$qb" --slurpfile pub "$OUT/publish.json" \
	'{messages:$n, size:$size, publish_rate:$pub[0].publish_rate, move_s:$secs, move_rate:$rate,
	  a:{vmhwm_mib:$ahwm, rss_peak_mib:$apeak, queue:$qa}, b:{vmhwm_mib:$bhwm, rss_peak_mib:$bpeak, queue:$qb}}' | tee "$OUT/result.json"
[ "$MODE" = drain ] && qb=$N
[ "$qa" -eq 0 ] && [ "$qb" -eq "$N" ] || { echo "FAIL: A holds $qa, B holds $qb (want 0 and $N)"; exit 1; }
