#!/usr/bin/env bash
# reclaim.sh BROKER_BINARY OUT_DIR: disk given back after a backlog drains,
# and bytes written per byte published (item 3 of issue 38).
#
# A fresh broker on 127.0.0.1:$PORT; railmq-perf publishes $N persistent
# 1 KiB messages with confirms and no consumer, then 4 consumers drain
# them; then a probe publishes one persistent 1 KiB message at a time with
# confirms (50 a second, to a queue of its own with an auto-ack consumer)
# for $AFTER seconds while the store reclaims its space. Prints a JSON line:
# data dir sizes (allocated blocks, du -s; apparent, du -sb) before, at the
# peak, right after the drain, and every 10 s after it; the broker's
# write_bytes (/proc/PID/io) over the publish and the drain divided by the
# bytes published; the probe's confirm latencies.
#   N=1000000 AFTER=300 PORT=5782 PERF=railmq-perf PROBE=probe
set -euo pipefail
BIN=$1 OUT=$2
N=${N:-1000000} AFTER=${AFTER:-300} PORT=${PORT:-5782}
PERF=${PERF:-railmq-perf} PROBE=${PROBE:-probe}
URI="amqp://guest:guest@127.0.0.1:$PORT/"
mkdir -p "$OUT"
D=$OUT/data
rm -rf "$D"
"$BIN" --listen 127.0.0.1:$PORT --data-dir "$D" >"$OUT/broker.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; [ -n "${SPID:-}" ] && kill $SPID 2>/dev/null; [ -n "${PPID2:-}" ] && kill -INT $PPID2 2>/dev/null; true' EXIT
sleep 3
alloc() { du -s --block-size=1 "$D" | cut -f1; }
appar() { du -sb "$D" | cut -f1; }
wbytes() { awk '/^write_bytes/ {print $2}' /proc/$PID/io; }
(while sleep 2; do echo "$(date +%s) $(alloc) $(appar)"; done) >"$OUT/sizes.txt" 2>/dev/null &
SPID=$!
pre_alloc=$(alloc) pre_appar=$(appar) w0=$(wbytes)
"$PERF" --uri "$URI" --producers 1 --consumers 0 --pmessages "$N" --size 1024 --persistent --confirm 256 --queue-prefix backlog --json >"$OUT/publish.json"
w1=$(wbytes) pub_alloc=$(alloc) pub_appar=$(appar)
"$PERF" --uri "$URI" --producers 0 --consumers 4 --predeclared --drain --prefetch 300 --multi-ack-every 50 --queue-prefix backlog --json >"$OUT/drain.json"
w2=$(wbytes) drain_alloc=$(alloc) drain_appar=$(appar)
t0=$(date +%s)
"$PROBE" "$URI" >"$OUT/probe.txt" 2>&1 &
PPID2=$!
after="["
for ((i = 10; i <= AFTER; i += 10)); do
	sleep $((t0 + i - $(date +%s)))
	after+="{\"s\":$i,\"alloc\":$(alloc),\"apparent\":$(appar)},"
done
kill -INT $PPID2; wait $PPID2 || true; PPID2=
after="${after%,}]"
kill $SPID; SPID=
peak_alloc=$(awk '{ if ($2 > m) m = $2 } END { print m }' "$OUT/sizes.txt")
peak_appar=$(awk '{ if ($3 > m) m = $3 } END { print m }' "$OUT/sizes.txt")
published=$((N * 1024))
jq -nc --argjson n "$N" --argjson pa "$pre_alloc" --argjson pp "$pre_appar" \
	--argjson ka "$peak_alloc" --argjson kp "$peak_appar" --argjson ua "$pub_alloc" --argjson up "$pub_appar" \
	--argjson da "$drain_alloc" --argjson dp "$drain_appar" --argjson after "$after" \
	--argjson w0 "$w0" --argjson w1 "$w1" --argjson w2 "$w2" --argjson pb "$published" \
	--slurpfile pub "$OUT/publish.json" --slurpfile drain "$OUT/drain.json" --arg probe "$(tail -1 "$OUT/probe.txt")" \
	'{messages:$n, before:{alloc:$pa, apparent:$pp}, published:{alloc:$ua, apparent:$up}, peak:{alloc:$ka, apparent:$kp},
	  drained:{alloc:$da, apparent:$dp}, after:$after,
	  write_per_byte_publish:(($w1-$w0)/$pb), write_per_byte_publish_and_drain:(($w2-$w0)/$pb),
	  publish_rate:$pub[0].publish_rate, drain_rate:$drain[0].drain_rate, probe:$probe}' | tee "$OUT/result.json"
