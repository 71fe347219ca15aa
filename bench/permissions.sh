#!/usr/bin/env bash
# The cost of permission checks: scenarios S1-S3 of compare.sh, each run as
# the administrator guest (permissions ".*") and as a user whose permissions
# are patterns (configure, write and read "^perf[.-]"; perf-app, created
# through the management API), side by side: a fresh broker per run, the
# user that goes first alternating from round to round.
#
#   bash bench/permissions.sh        (ROUNDS=3 DURATION=10s by default)
#
# Prints a Markdown table of medians and ratios (perf-app / guest); raw
# railmq-perf JSON lines go to RAW (default bench/results-raw-permissions.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
D=${DURATION:-10s}
RAW=${RAW:-bench/results-raw-permissions.jsonl}
TMP=$(mktemp -d /tmp/railmq-perm.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
go build -trimpath -ldflags=-s -o "$TMP/railmq" ./cmd/railmq
go build -trimpath -ldflags=-s -o "$TMP/railmq-perf" ./cmd/railmq-perf
declare -A FLAGS
FLAGS[S1]="--size 16 --autoack --duration $D"
FLAGS[S2]="--size 1024 --prefetch 300 --multi-ack-every 50 --duration $D"
FLAGS[S3]="--size 1024 --persistent --confirm 256 --producers 4 --consumers 2 --prefetch 300 --multi-ack-every 50 --duration $D"
: > "$RAW"
run() { # scenario user pass
	local dir="$TMP/data-$1-$2" port=5687 mport=15687
	rm -rf "$dir"
	"$TMP/railmq" --listen 127.0.0.1:$port --management-listen 127.0.0.1:$mport --data-dir "$dir" --log-level warn &
	local pid=$!
	for _ in $(seq 100); do curl -sf -u guest:guest http://127.0.0.1:$mport/api/whoami >/dev/null && break; sleep 0.1; done
	curl -sf -u guest:guest -X PUT -H 'content-type: application/json' -d '{"password":"pw","tags":""}' http://127.0.0.1:$mport/api/users/perf-app
	curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
		-d '{"configure":"^perf[.-]","write":"^perf[.-]","read":"^perf[.-]"}' http://127.0.0.1:$mport/api/permissions/%2F/perf-app
	sleep 1
	# shellcheck disable=SC2086
	"$TMP/railmq-perf" --uri "amqp://$2:$3@127.0.0.1:$port/" ${FLAGS[$1]} --broker-pid $pid --json |
		jq -c --arg s "$1" --arg u "$2" '{scenario:$s, user:$u, perf:.}' >> "$RAW"
	kill $pid; wait $pid || true
}
for r in $(seq "$ROUNDS"); do
	for s in S1 S2 S3; do
		if (( r % 2 )); then run $s guest guest; run $s perf-app pw; else run $s perf-app pw; run $s guest guest; fi
	done
done
echo "| scenario | figure | guest (.*) | perf-app (patterns) | ratio |"
echo "|---|---|--:|--:|--:|"
for s in S1 S2 S3; do
	for f in consume_rate broker.cpu_us_per_msg; do
		med() { jq -s --arg s "$s" --arg u "$1" "[.[] | select(.scenario==\$s and .user==\$u) | .perf.$f] | sort | .[length/2|floor]" "$RAW"; }
		a=$(med guest); b=$(med perf-app)
		echo "| $s | $f | $a | $b | $(jq -n "$b / $a * 100 | round / 100") |"
	done
done
