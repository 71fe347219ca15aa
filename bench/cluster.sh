#!/usr/bin/env bash
# A 3-node railmq cluster against a 3-node RabbitMQ 3.10.8 cluster, both on
# this machine, with quorum queues (make bench-cluster).
#
# The workload is S3's (bench/compare.sh) on a quorum queue: persistent
# 1 KiB messages, 4 producers with confirms (window 256), 2 consumers
# (prefetch 300, multi-ack every 50), for DURATION. railmq-perf spreads its
# connections over the three nodes (--uri A,B,C). Each round starts fresh
# clusters (fresh data directories), runs railmq's and RabbitMQ's one after
# the other (the one that goes first alternates), and stops them. Broker
# CPU is the user+system time of the three broker processes (railmq, or
# RabbitMQ's beam.smp), read from /proc before and after the run, divided
# by the messages the consumers received. The medians go to RESULTS.
#
# AGAINST=REV (a git revision: a commit, tag, branch, HEAD~1; make
# bench-cluster AGAINST=REV) builds railmq at REV from `git archive REV` in
# the temp dir (the repository is only read) and runs a 3-node cluster of it
# in RabbitMQ's place (on RabbitMQ's ports, 5781-5783): same workload,
# alternation and figures, with the columns "railmq (HEAD)" (the work tree,
# uncommitted changes included) and "railmq (REV)" and no goals, into
# bench/RESULTS-cluster-against.md. railmq-perf is HEAD's for both.
#
# Settings: ROUNDS=3 DURATION=10s AGAINST= RESULTS=bench/RESULTS-cluster.md
# (AGAINST mode: bench/RESULTS-cluster-against.md)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
ROUNDS=${ROUNDS:-3}
D=${DURATION:-10s}
AGAINST=${AGAINST:-}
# say, die, $TMP, port_open, head_version, against_rev, build_railmq_at.
# shellcheck source=SCRIPTDIR/../scripts/lib.sh
. scripts/lib.sh bench-cluster railmq-cluster
if [ -n "$AGAINST" ]; then
	against_rev "$AGAINST"
	OTHER=railmq-$AGAINST_SHA # the kind of REV's runs in the raw lines
	RAILMQ_VERSION=$(head_version) GO_VERSION=$("$GO" env GOVERSION)
	RESULTS=${RESULTS:-bench/RESULTS-cluster-against.md}
else
	OTHER=rabbitmq
	RESULTS=${RESULTS:-bench/RESULTS-cluster.md}
fi
chmod 755 "$TMP"
# shellcheck disable=SC2034 # read by stop_broker (scripts/lib.sh)
STOP_GRACE=60
PIDS=()
at_exit() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	stop_rabbits 2>/dev/null || true
}

cpu_ticks() { # pids...: user+system clock ticks of them all
	local t=0 p
	for p in "$@"; do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
HZ=$(getconf CLK_TCK)
waitport() { # port
	local i
	for ((i = 0; i < 600; i++)); do
		port_open 127.0.0.1 "$1" && return 0
		sleep 0.1
	done
	die "nothing accepts connections on 127.0.0.1:$1 after 60 s"
}

say "building railmq and railmq-perf"
"$GO" build -trimpath -ldflags=-s -o "$TMP/railmq" ./cmd/railmq
"$GO" build -trimpath -o "$TMP/perf" ./cmd/railmq-perf
if [ -n "$AGAINST" ]; then
	say "building railmq at $AGAINST ($AGAINST_SHA) from git archive"
	build_railmq_at "$AGAINST_SHA" "$TMP/railmq-base"
fi
[ -n "$AGAINST" ] || [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || { apt-get install -y -q rabbitmq-server >/dev/null; systemctl stop rabbitmq-server 2>/dev/null || true; }
echo "bench-cluster-secret" >"$TMP/cookie"

FLAGS=(--size 1024 --persistent --confirm 256 --producers 4 --consumers 2 --prefetch 300 --multi-ack-every 50
	--duration "$D" --queue-type quorum --json)

start_railmqs() { # binary dir base: AMQP on ports base+1..3, cluster on 20000 above
	local bin=$1 d=$2 base=$3 i peers="" uris=""
	for i in 1 2 3; do
		peers+="rabbit$i@localhost=127.0.0.1:$((base + 20000 + i)),"
	done
	PIDS=()
	for i in 1 2 3; do
		mkdir -p "$d/n$i"
		"$bin" --listen "127.0.0.1:$((base + i))" --data-dir "$d/n$i" --log-level warn \
			--node-name "rabbit$i@localhost" --cluster-listen "127.0.0.1:$((base + 20000 + i))" \
			--cluster-peers "${peers%,}" --cluster-secret-file "$TMP/cookie" >>"$d/n$i.log" 2>&1 &
		PIDS+=($!)
		uris+="amqp://guest:guest@127.0.0.1:$((base + i))/,"
	done
	for i in 1 2 3; do waitport $((base + i)); done
	URIS=${uris%,}
}
stop_railmqs() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
}

RDIR=""
rabbit_env() { # i
	local i=$1
	echo ERL_EPMD_PORT=4395 RABBITMQ_NODENAME="rabbit$i@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT=$((5780 + i)) RABBITMQ_DIST_PORT=$((25780 + i)) \
		RABBITMQ_MNESIA_BASE="$RDIR/r$i/mnesia" RABBITMQ_LOG_BASE="$RDIR/r$i/log" RABBITMQ_PID_FILE="$RDIR/r$i/pid" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$RDIR/r$i/plugins" RABBITMQ_CONFIG_FILE="$RDIR/r$i/rabbitmq"
}
rabbitctl() { # i args...
	local i=$1
	shift
	# shellcheck disable=SC2046
	env $(rabbit_env "$i") su rabbitmq -s /bin/sh -c "cd /var/lib/rabbitmq && /usr/lib/rabbitmq/bin/rabbitmqctl -n rabbit$i@localhost $*" >/dev/null
}
start_rabbits() { # dir
	RDIR=$1
	local i uris=""
	PIDS=()
	for i in 1 2 3; do
		mkdir -p "$RDIR/r$i/mnesia" "$RDIR/r$i/log"
		echo '[].' >"$RDIR/r$i/plugins"
		chown -R rabbitmq:rabbitmq "$RDIR/r$i"
		# shellcheck disable=SC2046
		env $(rabbit_env "$i") su rabbitmq -s /bin/sh -c 'ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; cd /var/lib/rabbitmq && exec /usr/lib/rabbitmq/bin/rabbitmq-server -detached' >>"$TMP/rabbitmq.log" 2>&1
		uris+="amqp://guest:guest@127.0.0.1:$((5780 + i))/,"
	done
	for i in 1 2 3; do
		local k
		for ((k = 0; k < 1200; k++)); do
			[ -s "$RDIR/r$i/pid" ] && port_open 127.0.0.1 $((5780 + i)) && break
			sleep 0.1
		done
		[ -s "$RDIR/r$i/pid" ] || die "RabbitMQ node $i did not start"
		PIDS+=("$(cat "$RDIR/r$i/pid")")
	done
	for i in 2 3; do
		rabbitctl "$i" stop_app
		rabbitctl "$i" join_cluster rabbit1@localhost
		rabbitctl "$i" start_app
	done
	for i in 1 2 3; do waitport $((5780 + i)); done
	URIS=${uris%,}
	# The guest user may log in from loopback only: these are loopback.
}
stop_rabbits() {
	[ -n "$RDIR" ] || return 0
	local i
	for i in 3 2 1; do rabbitctl "$i" stop 2>/dev/null || true; done
	RDIR=""
	PIDS=()
}

run_one() { # kind round; kind: railmq (HEAD), rabbitmq or railmq-SHA (AGAINST)
	local kind=$1 round=$2 d="$TMP/$1-$2" before after out
	mkdir -p "$d"
	case $kind in
	railmq) start_railmqs "$TMP/railmq" "$d" 5790 ;;
	rabbitmq) start_rabbits "$d" ;;
	*) start_railmqs "$TMP/railmq-base" "$d" 5780 ;;
	esac
	sleep 3 # elections
	before=$(cpu_ticks "${PIDS[@]}")
	out=$("$TMP/perf" --uri "$URIS" "${FLAGS[@]}") || say "$kind round $round: railmq-perf exited $?"
	after=$(cpu_ticks "${PIDS[@]}")
	if [ "$kind" = rabbitmq ]; then stop_rabbits; else stop_railmqs; fi
	echo "$out" | jq -c --arg k "$kind" --argjson cpu "$(((after - before)))" --argjson hz "$HZ" \
		'{kind: $k, consumed: .consumed, consume_rate: .consume_rate, publish_rate: .publish_rate, p99: .latency_us.p99,
		  cpu_s: ($cpu / $hz), cpu_us_per_msg: (if .consumed > 0 then ($cpu / $hz) * 1e6 / .consumed else null end), lost: .lost, duplicated: .duplicated}' \
		>>"$TMP/raw.jsonl"
	say "$kind round $round: $(tail -1 "$TMP/raw.jsonl")"
}

for ((r = 1; r <= ROUNDS; r++)); do
	if ((r % 2)); then run_one railmq "$r"; run_one "$OTHER" "$r"; else run_one "$OTHER" "$r"; run_one railmq "$r"; fi
done

med() { # kind field
	jq -s --arg k "$1" --arg f "$2" '[.[] | select(.kind == $k) | .[$f] | select(. != null)] | sort | if length == 0 then null else .[(length - 1) / 2 | floor] end' "$TMP/raw.jsonl"
}
{
	if [ -n "$AGAINST" ]; then
		echo "# 3-node cluster, quorum queue: railmq HEAD vs railmq $AGAINST"
		echo
		echo "Generated by \`make bench-cluster AGAINST=$AGAINST\` ($(date -u +%Y-%m-%d), $ROUNDS rounds of $D, $(nproc) cores shared by the six brokers' runs and the load tool; medians)."
		echo "railmq (HEAD): $RAILMQ_VERSION; railmq ($AGAINST): $AGAINST_SHA, from \`git archive\`; both \`go build -trimpath -ldflags=-s\` with $GO_VERSION; railmq-perf is HEAD's for both."
	else
		echo "# 3-node cluster, quorum queue: railmq vs RabbitMQ 3.10.8"
		echo
		echo "Generated by \`make bench-cluster\` ($(date -u +%Y-%m-%d), $ROUNDS rounds of $D, $(nproc) cores shared by the six brokers' runs and the load tool; medians)."
	fi
	echo "Workload: S3 on one quorum queue: persistent 1 KiB, 4 producers with confirms (window 256), 2 consumers (prefetch 300, multi-ack every 50), connections spread over the three nodes."
	echo "Broker CPU: user+system time of the three broker processes over the run, per message received."
	echo
	if [ -n "$AGAINST" ]; then
		echo "| figure | railmq (HEAD) | railmq ($AGAINST) | HEAD / $AGAINST |"
		echo "|---|---|---|---|"
	else
		echo "| figure | railmq | RabbitMQ | ratio | goal |"
		echo "|---|---|---|---|---|"
	fi
	for f in consume_rate publish_rate cpu_us_per_msg p99; do
		a=$(med railmq "$f") b=$(med "$OTHER" "$f")
		ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{if (b > 0 && a != "null") printf "%.2f×", a / b; else print "n/a"}')
		if [ -n "$AGAINST" ]; then
			printf '| %s | %s | %s | %s |\n' "$f" "$a" "$b" "$ratio"
			continue
		fi
		goal=""
		case $f in consume_rate) goal="≥ 2×" ;; cpu_us_per_msg) goal="≤ 0.5×" ;; esac
		printf '| %s | %s | %s | %s | %s |\n' "$f" "$a" "$b" "$ratio" "$goal"
	done
	echo
	echo "Raw runs:"
	echo
	echo '```'
	cat "$TMP/raw.jsonl"
	echo '```'
} >"$RESULTS"
cat "$RESULTS"
