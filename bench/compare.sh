#!/usr/bin/env bash
# railmq against RabbitMQ (or against railmq at another revision) on the same
# machine, scenario by scenario.
#
#   bash bench/compare.sh                 (make bench-compare)
#   AGAINST=REV bash bench/compare.sh     (make bench-compare AGAINST=REV)
#   bash bench/compare.sh --smoke         (make bench-smoke)
#
# Compare mode runs scenarios S1..S9 (and S10-S14 when named, below) with cmd/railmq-perf against a
# release build of railmq and against Debian's rabbitmq-server (installed with
# apt-get when missing). Every run gets a freshly started broker with fresh
# data directories, stopped by its own pid right after the run; within a round
# the two brokers run one after the other, and the one that goes first
# alternates from round to round (A B, B A, A B, ...). railmq-perf samples the
# broker's CPU time and RSS from /proc (--broker-pid: railmq's pid, or
# RabbitMQ's beam.smp pid from RABBITMQ_PID_FILE). Around each railmq-perf
# run the script also counts the broker's system calls and context switches
# (with `perf stat -e raw_syscalls:sys_enter,context-switches -p PID` where
# perf works, else from /proc: reads+writes (syscr+syscw in /proc/PID/io)
# and voluntary+nonvoluntary switches summed over /proc/PID/task/*/status)
# and railmq's allocations (go_memstats_mallocs_total from its
# --prometheus-listen endpoint; RabbitMQ: n/a); the report divides them by
# the messages delivered (published when none were). In S6, railmq is killed
# with SIGKILL once the backlog is published and restarted on the same data
# directory: the time until it accepts connections again is the "restart after
# kill -9" figure (railmq only), and the drain runs against the restarted
# broker.
#
# AGAINST=REV (a git revision: a commit, tag, branch, HEAD~1) builds railmq at
# REV from `git archive REV` in the temp dir (the repository is only read) and
# runs it in RabbitMQ's place: same scenarios, alternation and figures, with
# the columns "railmq (HEAD)" (the work tree, uncommitted changes included)
# and "railmq (REV)" and no goals. railmq-perf is HEAD's for both.
#
# The report (median per figure and broker across rounds, the ratio, and in
# the RabbitMQ comparison the goal and PASS/FAIL) is printed as a Markdown
# table and written to RESULTS; the raw railmq-perf JSON lines, one record per
# run, to RAW (both overwritten by each run). In RESULTS only the lines
# between the markers <!-- BEGIN GENERATED --> and <!-- END GENERATED --> are
# rewritten; what comes before and after them is hand-written and kept. A
# RESULTS file without the two markers stops the script before it runs
# anything; a missing one is created.
#
# Settings (environment):
#   AGAINST=          git revision to compare HEAD with instead of RabbitMQ
#   RAILMQ_FLAGS=     more flags for HEAD's railmq only (e.g. AGAINST=HEAD
#                     RAILMQ_FLAGS="--data-encryption-key-file KEY": the
#                     same code with and without encryption at rest)
#   ROUNDS=3          rounds of S1-S5, S7, S8, S10-S14
#   S6_ROUNDS=1       rounds of S6 (long)
#   S9_ROUNDS=1       rounds of S9 (long)
#   S9_DURATION=60s   publishing time of S9, the overload scenario
#   DURATION=10s      publishing time of S1-S4 (and of S5 and S7 when set)
#   S5_DURATION=15s   publishing time of S5 (default DURATION when that is set)
#   S7_DURATION=10s   how long S7 holds its idle connections (idem)
#   S6_MESSAGES=1000000  backlog size of S6
#   S7_CONNECTIONS=1000  idle connections of S7
#   S8_QUEUES=5000    durable queues of S8
#   SCENARIOS="S1 S2 S3 S4 S5 S6 S7 S8 S9"   which scenarios to run; S10
#                     (S3 on a quorum queue) runs only when named:
#                     SCENARIOS="S3 S10" RESULTS=bench/RESULTS-quorum.md
#                     RAW=bench/results-raw-quorum.jsonl
#                     S11-S14 (streams) run only when named, too:
#                     SCENARIOS="S11 S12 S13 S14"
#                     RESULTS=bench/RESULTS-streams-compare.md
#                     RAW=bench/results-raw-streams.jsonl
#   S12_MESSAGES=1000000  16 B messages S12 writes into the stream, then
#                     replays with three consumers (frame engine)
#   S14_MESSAGES=300000   1 KiB messages S14 writes, then replays
#   SETTLE=2          seconds to wait after a broker accepts connections
#   RUN_TIMEOUT=7200  seconds one railmq-perf run may take
#   ENGINE=amqp091    railmq-perf --engine: amqp091 (amqp091-go) or frames
#                     (raw sockets, so that the broker is the bottleneck)
#   RAILMQ_PORT=5691 RABBIT_PORT=5692 EPMD_PORT=4392 METRICS_PORT=15691
#                     (next free one is used; in AGAINST mode railmq at REV
#                     takes RABBIT_PORT; METRICS_PORT is railmq's
#                     --prometheus-listen, for its allocation count)
#   RESULTS=bench/RESULTS.md  RAW=bench/results-raw.jsonl
#                     (AGAINST mode: bench/RESULTS-against.md and
#                     bench/results-raw-against.jsonl)
#
# Smoke mode builds railmq, starts it on a free port, runs railmq-perf for 5s
# (1 KiB, prefetch 300, multi-ack every 50; --engine ENGINE), prints the
# broker's allocations, system calls and context switches per message,
# stops it, and exits with
# railmq-perf's status: 3 when a message was lost or duplicated, 1 on a
# connection error. It never asserts a speed.
#
# Progress goes to stderr; compare mode prints the report on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MODE=compare
ENGINE=${ENGINE:-amqp091}
case "${1:-}" in
--smoke) MODE=smoke ;;
"") ;;
*) echo "usage: bash bench/compare.sh [--smoke]" >&2; exit 2 ;;
esac

# say, die, $TMP, cleanup on exit, stop_broker, port_open, free_port,
# wait_listening, head_version, against_rev, build_railmq_at.
# shellcheck source=SCRIPTDIR/../scripts/lib.sh
. scripts/lib.sh compare railmq-compare
exec 3>&1 1>&2 # stdout is for the report (fd 3)
chmod 755 "$TMP" # RabbitMQ runs as user rabbitmq, its directories are in here
# shellcheck disable=SC2034 # read by stop_broker (scripts/lib.sh)
STOP_GRACE=60    # both brokers shut down cleanly on SIGTERM; SIGKILL after that

# The kind of broker running now (railmq or rabbitmq; its pid is
# $BROKER_PID), and our epmd.
BROKER_KIND="" EPMD_PID=""
at_exit() {
	if [ -n "$EPMD_PID" ]; then kill "$EPMD_PID" 2>/dev/null || true; wait "$EPMD_PID" 2>/dev/null || true; fi
}

# pick_port BASE [AVOID...]: the first port from BASE (within 100) nothing
# listens on.
pick_port() {
	local base=$1 p
	shift
	p=$(free_port "$base" $((base + 100)) "$@")
	[ -n "$p" ] || die "no free port in $base..$((base + 100))"
	echo "$p"
}
rss_kib() { awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.3f", b-a}'; }

# --- railmq -------------------------------------------------------------------
# METRICS_URL is railmq's Prometheus endpoint while one runs (empty for
# RabbitMQ, or for a railmq built before --prometheus-listen existed).
METRICS_URL=""
start_railmq() { # binary dir port [seconds]
	mkdir -p "$2"
	BROKER_LOG="$1.log"
	local metrics=()
	METRICS_URL=""
	# Not `--help | grep -q`: with pipefail, grep's early exit can fail the
	# pipeline through SIGPIPE.
	if [ -n "${METRICS_PORT:-}" ] && [[ "$("$1" --help 2>&1)" == *-prometheus-listen* ]]; then
		metrics=(--prometheus-listen "127.0.0.1:$METRICS_PORT")
		METRICS_URL="http://127.0.0.1:$METRICS_PORT/metrics"
	fi
	local extra=()
	if [ "$1" = "$TMP/railmq" ] && [ -n "${RAILMQ_FLAGS:-}" ]; then
		read -r -a extra <<<"$RAILMQ_FLAGS"
	fi
	"$1" --listen "127.0.0.1:$3" --data-dir "$2/data" --log-level warn "${metrics[@]}" "${extra[@]}" >>"$BROKER_LOG" 2>&1 &
	BROKER_KIND=railmq BROKER_PID=$!
	wait_listening "$3" "${4:-60}"
}

# --- system counters of the broker -------------------------------------------------
# SYS_METHOD is perf when `perf stat` can count syscalls and context
# switches of a process, else proc (SYS_METHOD=proc in the environment
# forces /proc).
SYS_METHOD=${SYS_METHOD:-}
if [ -z "$SYS_METHOD" ] && command -v perf >/dev/null && perf stat -x, -e raw_syscalls:sys_enter,context-switches -o /dev/null -- true >/dev/null 2>&1; then
	SYS_METHOD=perf
fi
[ "$SYS_METHOD" = perf ] || SYS_METHOD=proc
mallocs() { # railmq's go_memstats_mallocs_total, or null
	local v=""
	if [ -n "$METRICS_URL" ]; then
		v=$(curl -sf --max-time 5 "$METRICS_URL" | awk '$1 == "go_memstats_mallocs_total" {printf "%.0f", $2}') || v=""
	fi
	echo "${v:-null}"
}
proc_ctxsw() { # PID: voluntary+nonvoluntary context switches over its threads
	cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {printf "%.0f", n}'
}
proc_syscalls() { # PID: read and write system calls (syscr + syscw)
	awk '/^sysc[rw]:/ {n += $2} END {printf "%.0f", n}' "/proc/$1/io" 2>/dev/null || echo 0
}
# sys_begin PID / sys_end: SYS_JSON is {method, syscalls, ctx_switches,
# mallocs} for the broker between the two (mallocs null for RabbitMQ).
sys_begin() {
	SYS_PID=$1 SYS_PERF="" SYS_OUT="$TMP/sys.out"
	SYS_M0=$(mallocs)
	if [ "$SYS_METHOD" = perf ]; then
		perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$SYS_PID" -o "$SYS_OUT" >/dev/null 2>&1 &
		SYS_PERF=$!
	else
		SYS_C0=$(proc_ctxsw "$SYS_PID") SYS_S0=$(proc_syscalls "$SYS_PID")
	fi
}
sys_end() {
	local m1 sc=null cs=null dm=null
	m1=$(mallocs)
	if [ -n "$SYS_PERF" ]; then
		kill -INT "$SYS_PERF" 2>/dev/null || true
		wait "$SYS_PERF" 2>/dev/null || true
		sc=$(awk -F, '$3 ~ /raw_syscalls:sys_enter/ && $1 ~ /^[0-9]+$/ {print $1}' "$SYS_OUT")
		cs=$(awk -F, '$3 ~ /context-switches/ && $1 ~ /^[0-9]+$/ {print $1}' "$SYS_OUT")
	else
		sc=$(($(proc_syscalls "$SYS_PID") - SYS_S0)) cs=$(($(proc_ctxsw "$SYS_PID") - SYS_C0))
	fi
	if [ "$SYS_M0" != null ] && [ "$m1" != null ]; then dm=$((m1 - SYS_M0)); fi
	SYS_JSON=$(jq -nc --arg m "$SYS_METHOD" --argjson sc "${sc:-null}" --argjson cs "${cs:-null}" --argjson dm "$dm" \
		'{method:$m, syscalls:$sc, ctx_switches:$cs, mallocs:$dm}')
}
# per_msg JSON SYS: the sys figures per message of a railmq-perf report.
per_msg() {
	jq -nc --argjson p "$1" --argjson s "$2" '($p.consumed // 0) as $c | (if $c > 0 then $c else ($p.published // 0) end) as $n
		| def d($v): if $v == null or $n == 0 then null else ($v / $n * 1000 | round / 1000) end;
		{allocs_per_msg: d($s.mallocs), syscalls_per_msg: d($s.syscalls), ctx_switches_per_msg: d($s.ctx_switches)}'
}

# --- RabbitMQ -----------------------------------------------------------------
RABBIT_NOFILE=""
start_rabbitmq() { # dir port
	local d=$1 port=$2
	mkdir -p "$d/mnesia" "$d/log"
	echo '[].' >"$d/plugins"
	chown -R rabbitmq:rabbitmq "$d"
	# su keeps the environment; PAM resets the soft open-file limit to 1024,
	# so it is raised inside: to 65536 when allowed, else to the hard limit.
	env ERL_EPMD_PORT="$EPMD_PORT" RABBITMQ_NODENAME="compare$$@localhost" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$DIST_PORT" \
		RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_PID_FILE="$d/pid" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$d/plugins" RABBITMQ_CONFIG_FILE="$d/rabbitmq" \
		su rabbitmq -s /bin/sh -c 'ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; cd /var/lib/rabbitmq && exec /usr/lib/rabbitmq/bin/rabbitmq-server -detached' \
		>>"$TMP/rabbitmq.log" 2>&1
	local i
	for ((i = 0; i < 1200; i++)); do
		[ -s "$d/pid" ] && port_open 127.0.0.1 "$port" && break
		sleep 0.1
	done
	[ -s "$d/pid" ] || { tail -20 "$TMP/rabbitmq.log" "$d"/log/*.log >&2 2>/dev/null || true; die "RabbitMQ wrote no pid file"; }
	BROKER_KIND=rabbitmq BROKER_PID=$(cat "$d/pid")
	port_open 127.0.0.1 "$port" || { tail -20 "$d"/log/*.log >&2 2>/dev/null || true; die "RabbitMQ did not open port $port"; }
	RABBIT_NOFILE=$(awk '/^Max open files/{print $4}' "/proc/$BROKER_PID/limits")
}

build() {
	say "building railmq (release) and railmq-perf"
	"$GO" build -trimpath -ldflags=-s -o "$TMP/railmq" ./cmd/railmq
	"$GO" build -trimpath -o "$TMP/perf" ./cmd/railmq-perf
	if [ -n "$AGAINST" ]; then
		say "building railmq (release) at $AGAINST ($AGAINST_SHA) from git archive"
		build_railmq_at "$AGAINST_SHA" "$TMP/railmq-base"
	fi
}

# --- smoke ----------------------------------------------------------------------
if [ "$MODE" = smoke ]; then
	say "smoke: building"
	"$GO" build -o "$TMP/railmq" ./cmd/railmq
	"$GO" build -o "$TMP/perf" ./cmd/railmq-perf
	port=$(pick_port "${SMOKE_PORT:-5695}")
	METRICS_PORT=$(pick_port "${METRICS_PORT:-15695}" "$port")
	start_railmq "$TMP/railmq" "$TMP/smoke" "$port"
	say "smoke: railmq pid $BROKER_PID on port $port; 5s of 1 KiB messages, --engine $ENGINE"
	rc=0
	sys_begin "$BROKER_PID"
	"$TMP/perf" --engine "$ENGINE" --uri "amqp://guest:guest@127.0.0.1:$port/" --broker-pid "$BROKER_PID" \
		--duration 5s --size 1024 --prefetch 300 --multi-ack-every 50 >"$TMP/smoke.out" || rc=$?
	sys_end
	cat "$TMP/smoke.out"
	if command -v jq >/dev/null && tail -1 "$TMP/smoke.out" | jq -e . >/dev/null 2>&1; then
		say "smoke: broker per message ($SYS_METHOD): $(per_msg "$(tail -1 "$TMP/smoke.out")" "$SYS_JSON")"
	fi
	stop_broker
	case $rc in
	0) say "smoke: ok" ;;
	3) say "smoke: FAIL: messages lost or duplicated (railmq-perf exit 3)" ;;
	*) say "smoke: FAIL: railmq-perf exit $rc" ;;
	esac
	exit $rc
fi

# --- compare: setup ---------------------------------------------------------------
AGAINST=${AGAINST:-}
ROUNDS=${ROUNDS:-3}
S6_ROUNDS=${S6_ROUNDS:-1}
S9_ROUNDS=${S9_ROUNDS:-1}
D9=${S9_DURATION:-60s}
D=${DURATION:-10s}
D5=${S5_DURATION:-${DURATION:-15s}}
D7=${S7_DURATION:-${DURATION:-10s}}
S6_MESSAGES=${S6_MESSAGES:-1000000}
S7_CONNECTIONS=${S7_CONNECTIONS:-1000}
S8_QUEUES=${S8_QUEUES:-5000}
S12_MESSAGES=${S12_MESSAGES:-1000000}
S14_MESSAGES=${S14_MESSAGES:-300000}
SCENARIOS=${SCENARIOS:-S1 S2 S3 S4 S5 S6 S7 S8 S9}
SETTLE=${SETTLE:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-7200}
RAILMQ_VERSION=$(head_version)
if [ -n "$AGAINST" ]; then
	against_rev "$AGAINST"
	OTHER=railmq-$AGAINST_SHA # the broker name in RAW
	LABEL_A="railmq (HEAD)" LABEL_B="railmq ($AGAINST)" RATIO_HEAD="HEAD / $AGAINST"
	TITLE_LINE="railmq HEAD vs railmq $AGAINST"
	RESULTS=${RESULTS:-bench/RESULTS-against.md}
	RAW=${RAW:-bench/results-raw-against.jsonl}
else
	OTHER=rabbitmq
	LABEL_A="railmq" LABEL_B="RabbitMQ" RATIO_HEAD="railmq / RabbitMQ"
	TITLE_LINE="railmq vs RabbitMQ"
	RESULTS=${RESULTS:-bench/RESULTS.md}
	RAW=${RAW:-bench/results-raw.jsonl}
fi

# RESULTS keeps what is outside these markers (see the header).
BEGIN_MARK='<!-- BEGIN GENERATED -->'
END_MARK='<!-- END GENERATED -->'
markers_ok() { # file: both markers, once each, BEGIN first
	awk -v B="$BEGIN_MARK" -v E="$END_MARK" '$0 == B {b++; bl = NR} $0 == E {e++; el = NR}
		END {exit !(b == 1 && e == 1 && bl < el)}' "$1"
}
if [ -e "$RESULTS" ] && ! markers_ok "$RESULTS"; then
	die "$RESULTS has not exactly one '$BEGIN_MARK' line followed by one '$END_MARK' line: add them around the generated part (or remove the file)"
fi

apt_install() { # packages...: install with apt-get, never starting a service
	local policy=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy=1
	fi
	say "installing $* with apt-get"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
	if [ -n "$policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
}
need=()
[ -n "$AGAINST" ] || [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
command -v jq >/dev/null || need+=(jq)
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

build
RAILMQ_PORT=$(pick_port "${RAILMQ_PORT:-5691}")
RABBIT_PORT=$(pick_port "${RABBIT_PORT:-5692}" "$RAILMQ_PORT")
METRICS_PORT=$(pick_port "${METRICS_PORT:-15691}" "$RAILMQ_PORT" "$RABBIT_PORT")
if [ -z "$AGAINST" ]; then
	EPMD_BIN=$(command -v epmd || ls /usr/lib/erlang/erts-*/bin/epmd | head -1)
	DIST_PORT=$(pick_port $((RABBIT_PORT + 20000)))
	EPMD_PORT=$(pick_port "${EPMD_PORT:-4392}")
	# A port mapper of our own, so the nodes started here touch no other node's.
	"$EPMD_BIN" -port "$EPMD_PORT" >/dev/null 2>&1 &
	EPMD_PID=$!
	RABBIT_VERSION=$(dpkg-query -W -f='${Version}' rabbitmq-server)
	ERLANG_VERSION=$(dpkg-query -W -f='${Version}' erlang-base 2>/dev/null || echo "?")
fi

MACHINE="$(nproc) CPUs ($(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)), $(free -g | awk '/^Mem:/{print $2}') GiB RAM (free -g), $(uname -sr)"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
GO_VERSION=$("$GO" env GOVERSION)
: >"$RAW"

# --- scenarios ------------------------------------------------------------------
# Flags common to every run: --uri, --json and --broker-pid. A scenario with
# DRAIN_FLAGS has a second run on the same broker (S6), before which railmq
# is killed with SIGKILL and restarted.
declare -A FLAGS DRAIN_FLAGS TITLE
TITLE[S1]="transient, 16 B, 1 -> 1, autoack"
FLAGS[S1]="--size 16 --autoack --duration $D"
TITLE[S2]="transient, 1 KiB, 1 -> 1, manual ack, prefetch 300, multi-ack every 50"
FLAGS[S2]="--size 1024 --prefetch 300 --multi-ack-every 50 --duration $D"
TITLE[S3]="persistent, 1 KiB, durable queue, 4 producers with confirms (window 256), 2 consumers"
FLAGS[S3]="--size 1024 --persistent --confirm 256 --producers 4 --consumers 2 --prefetch 300 --multi-ack-every 50 --duration $D"
TITLE[S4]="fanout to 10 queues, 10 consumers, 1 KiB, prefetch 300, multi-ack every 50"
FLAGS[S4]="--size 1024 --exchange-type fanout --fanout-queues 10 --consumers 10 --prefetch 300 --multi-ack-every 50 --duration $D"
TITLE[S5]="latency at 5,000 msg/s, 1 -> 1, 1 KiB, manual ack"
FLAGS[S5]="--size 1024 --rate 5000 --prefetch 300 --duration $D5"
TITLE[S6]="backlog: $S6_MESSAGES x 1 KiB persistent with confirms, no consumer; railmq killed with SIGKILL and restarted; then drained by 4 consumers"
FLAGS[S6]="--producers 1 --consumers 0 --pmessages $S6_MESSAGES --size 1024 --persistent --confirm 256 --queue-prefix backlog"
DRAIN_FLAGS[S6]="--producers 0 --consumers 4 --predeclared --drain --prefetch 300 --multi-ack-every 50 --queue-prefix backlog"
TITLE[S7]="$S7_CONNECTIONS idle connections, one channel each, heartbeat 10s"
FLAGS[S7]="--idle-connections $S7_CONNECTIONS --heartbeat 10s --producers 0 --consumers 0 --duration $D7"
TITLE[S8]="$S8_QUEUES durable queues declared (and bound to a fanout exchange), one persistent message each"
# S9 is issue [8]'s overload: a publisher at full speed that outruns its
# consumers for a minute, so that the broker's memory bound shows.
TITLE[S9]="overload: 1 publisher at full speed -> fanout -> 10 transient queues, 10 consumers, $D9, 1 KiB, prefetch 300, multi-ack every 50"
FLAGS[S9]="--size 1024 --exchange-type fanout --fanout-queues 10 --consumers 10 --prefetch 300 --multi-ack-every 50 --duration $D9 --queue-prefix overload"
FLAGS[S8]="--exchange-type fanout --fanout-queues $S8_QUEUES --persistent --confirm 1 --pmessages 1 --producers 1 --consumers 0 --queue-prefix decl"
# S10 is S3 on a quorum queue on one node (issue [17]): railmq's is a Raft
# group of one member, RabbitMQ's a single-node quorum queue. The report
# also sets railmq's S10 beside its own S3 (run SCENARIOS="S3 S10").
TITLE[S10]="S3 on a quorum queue, one node: persistent, 1 KiB, 4 producers with confirms (window 256), 2 consumers"
FLAGS[S10]="${FLAGS[S3]} --queue-type quorum --queue-prefix quorum"
# S11-S14 are streams (issue [18], x-queue-type stream, one node): every
# consumer reads the whole stream, acks are credit; railmq-perf checks each
# consumer for every message once and in order. S11 publishes and replays at
# once, S12 and S14 write the stream first (--replay) and then time three
# consumers reading it from first; S13 is a consumer on next at 5,000 msg/s.
TITLE[S11]="stream: 1 KiB persistent with confirms (window 256) into one stream, 3 consumers from first at the same time, prefetch 1000, multi-ack every 100"
FLAGS[S11]="--queue-type stream --queue-prefix stream --size 1024 --persistent --confirm 256 --consumers 3 --stream-offset first --prefetch 1000 --multi-ack-every 100 --duration $D"
TITLE[S12]="stream replay, frame engine: $S12_MESSAGES x 16 B written with confirms (window 1024), then 3 consumers from first, prefetch 2000, multi-ack every 200"
FLAGS[S12]="--engine frames --queue-type stream --queue-prefix replay16 --size 16 --persistent --confirm 1024 --pmessages $S12_MESSAGES --replay --consumers 3 --stream-offset first --prefetch 2000 --multi-ack-every 200"
# S13 acks every 50 (S5 acks each message): RabbitMQ 3.10.8's stream
# consumer turns every single ack into credit and a read, which took its p99
# at 5,000 msg/s from about 25 ms to about 0.7 s in a trial here; the
# comparison gives RabbitMQ its better setting.
TITLE[S13]="stream latency: 1 KiB at 5,000 msg/s, one consumer on next, prefetch 300, multi-ack every 50"
FLAGS[S13]="--queue-type stream --queue-prefix streamlat --size 1024 --persistent --rate 5000 --stream-offset next --prefetch 300 --multi-ack-every 50 --duration $D5"
TITLE[S14]="stream replay: $S14_MESSAGES x 1 KiB written with confirms (window 256), then 3 consumers from first, prefetch 1000, multi-ack every 100"
FLAGS[S14]="--queue-type stream --queue-prefix replay1k --size 1024 --persistent --confirm 256 --pmessages $S14_MESSAGES --replay --consumers 3 --stream-offset first --prefetch 1000 --multi-ack-every 100"

# run_perf URI PID FLAGS...: sets PERF_JSON (the JSON line, or null), PERF_RC,
# PERF_WALL (seconds) and PERF_SYS (the broker's system counters, sys_end).
run_perf() {
	local uri=$1 pid=$2 out="$TMP/perf.out" t0
	shift 2
	PERF_RC=0
	t0=$(now)
	sys_begin "$pid"
	timeout -k 30 -s INT "$RUN_TIMEOUT" "$TMP/perf" --engine "$ENGINE" --uri "$uri" --json --broker-pid "$pid" "$@" >"$out" 2>>"$TMP/perf.log" || PERF_RC=$?
	sys_end
	PERF_SYS=$SYS_JSON
	PERF_WALL=$(since "$t0")
	if [ "$PERF_RC" -ne 0 ]; then
		say "  railmq-perf exit $PERF_RC; its last messages:"
		tail -5 "$TMP/perf.log" | sed 's/^/    /' >&2
	fi
	PERF_JSON=$(tail -1 "$out")
	if [ -z "$PERF_JSON" ] || ! jq -e . >/dev/null 2>&1 <<<"$PERF_JSON"; then PERF_JSON=null; fi
}

disk_bytes() { du -sb "$1" 2>/dev/null | cut -f1 || echo null; }

# one SCENARIO BROKER ROUND: a fresh broker, one run (two for S6), stop.
RUN_NO=0
one() {
	local s=$1 b=$2 r=$3 port dir uri bin="" data
	RUN_NO=$((RUN_NO + 1))
	dir="$TMP/run$RUN_NO-$b"
	if [ "$b" = railmq ]; then
		port=$RAILMQ_PORT bin=$TMP/railmq data=$dir/data
	elif [ -n "$AGAINST" ]; then
		port=$RABBIT_PORT bin=$TMP/railmq-base data=$dir/data
	else
		port=$RABBIT_PORT data=$dir/mnesia
	fi
	if [ -n "$bin" ]; then start_railmq "$bin" "$dir" "$port"; else start_rabbitmq "$dir" "$port"; fi
	uri="amqp://guest:guest@127.0.0.1:$port/"
	sleep "$SETTLE"
	local rss0 j jd="null" rc wall rcd=0 walld=0 nofile=null disk=null diska=null recover=null t0 sys sysd=null
	if [ "$BROKER_KIND" = rabbitmq ]; then nofile=${RABBIT_NOFILE:-null}; fi
	rss0=$(rss_kib "$BROKER_PID")
	say "$s round $r: $b (pid $BROKER_PID, port $port, rss $((rss0 / 1024)) MiB)"
	# shellcheck disable=SC2086 # the flags are words
	run_perf "$uri" "$BROKER_PID" ${FLAGS[$s]}
	j=$PERF_JSON rc=$PERF_RC wall=$PERF_WALL sys=$PERF_SYS
	if [ -n "${DRAIN_FLAGS[$s]:-}" ]; then
		disk=$(disk_bytes "$data")
		if [ "$BROKER_KIND" = railmq ]; then
			kill -KILL "$BROKER_PID" 2>/dev/null || true
			wait "$BROKER_PID" 2>/dev/null || true
			BROKER_PID=
			t0=$(now)
			start_railmq "$bin" "$dir" "$port" 600
			recover=$(since "$t0")
			say "  $b: killed with SIGKILL with the backlog in place; accepting connections again after ${recover}s (pid $BROKER_PID)"
		fi
		# shellcheck disable=SC2086
		run_perf "$uri" "$BROKER_PID" ${DRAIN_FLAGS[$s]}
		jd=$PERF_JSON rcd=$PERF_RC walld=$PERF_WALL sysd=$PERF_SYS
		diska=$(disk_bytes "$data")
	fi
	stop_broker
	rm -rf "$dir"
	jq -nc --arg s "$s" --arg b "$b" --argjson r "$r" --argjson rss0 "${rss0:-0}" \
		--argjson rc "$rc" --argjson wall "$wall" --argjson rcd "$rcd" --argjson walld "$walld" \
		--argjson nofile "$nofile" --argjson perf "$j" --argjson drain "$jd" \
		--argjson disk "$disk" --argjson diska "$diska" --argjson recover "$recover" \
		--argjson sys "$sys" --argjson sysd "$sysd" --arg engine "$ENGINE" \
		'{scenario:$s, broker:$b, round:$r, engine:$engine, rss_before_kib:$rss0, exit:$rc, wall_s:$wall, perf:$perf, sys:$sys}
		+ (if $sysd != null then {drain_sys:$sysd} else {} end)
		+ (if $b == "rabbitmq" then {open_files_limit:$nofile} else {} end)
		+ (if $drain != null or $rcd != 0 then {drain:$drain, drain_exit:$rcd, drain_wall_s:$walld} else {} end)
		+ (if $disk != null then {disk_bytes:$disk, disk_after_drain_bytes:$diska} else {} end)
		+ (if $recover != null then {recover_s:$recover} else {} end)' >>"$RAW"
	jq -r '"  \(.broker): exit \(.exit)"
		+ (if .perf then ", publish \(.perf.publish_rate)/s, consume \(.perf.consume_rate)/s, p99 \(.perf.latency_us.p99) us, cpu \(.perf.broker.cpu_us_per_msg) us/msg (railmq-perf \(.perf.perf_cpu_us_per_msg)), rss peak \(.perf.broker.rss_peak_kib) KiB, lost \(.perf.lost), dup \(.perf.duplicated)" else "" end)
		+ (if .drain then "; drain \(.drain.drain_rate)/s, exit \(.drain_exit)" else "" end)' <<<"$(tail -1 "$RAW")" >&2
}

T_START=$(now)
if [ -n "$AGAINST" ]; then
	say "railmq $RAILMQ_VERSION on $RAILMQ_PORT, railmq $AGAINST ($AGAINST_SHA) on $RABBIT_PORT; raw lines to $RAW"
else
	say "railmq $RAILMQ_VERSION on $RAILMQ_PORT, RabbitMQ $RABBIT_VERSION on $RABBIT_PORT (epmd $EPMD_PORT); raw lines to $RAW"
fi
for s in $SCENARIOS; do
	[ -n "${FLAGS[$s]:-}" ] || die "unknown scenario $s"
	n=$ROUNDS
	[ "$s" = S6 ] && n=$S6_ROUNDS
	[ "$s" = S9 ] && n=$S9_ROUNDS
	for ((r = 1; r <= n; r++)); do
		if ((r % 2)); then order="railmq $OTHER"; else order="$OTHER railmq"; fi
		for b in $order; do one "$s" "$b" "$r"; done
	done
done
ELAPSED=$(awk -v a="$T_START" -v b="$(now)" 'BEGIN{printf "%.0f", b-a}')

# --- report ---------------------------------------------------------------------
# Each figure is computed per run, then the median is taken per broker. In
# AGAINST mode ($goals false) the Goal and Result columns are left out.
read -r -d '' REPORT <<'JQ' || true
def med: map(select(. != null)) | sort | if length == 0 then null
	elif length % 2 == 1 then .[length / 2 | floor]
	else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def num: if . == null then "–"
	elif (. | fabs) >= 1000 then (. | round | tostring)
	elif (. | fabs) >= 10 then ((. * 10 | round) / 10 | tostring)
	else ((. * 100 | round) / 100 | tostring) end;
# msgs: what broker CPU is divided by, deliveries (publishes when none).
def msgs: if (.perf.consumed // 0) > 0 then .perf.consumed else .perf.published end;
def fig($k): try (
	if $k == "consume_rate" then .perf.consume_rate
	elif $k == "publish_rate" then .perf.publish_rate
	elif $k == "cpu" then .perf.broker.cpu_us_per_msg
	elif $k == "perf_cpu" then .perf.perf_cpu_us_per_msg
	elif $k == "allocs" then (if .sys.mallocs == null then null else .sys.mallocs / msgs end)
	elif $k == "syscalls" then .sys.syscalls / msgs
	elif $k == "ctxsw" then .sys.ctx_switches / msgs
	elif $k == "p50" then .perf.latency_us.p50
	elif $k == "p99" then .perf.latency_us.p99
	elif $k == "rss_peak" then .perf.broker.rss_peak_kib / 1024
	elif $k == "s6_drain" then .drain.drain_rate
	elif $k == "s6_peak" then ([.perf.broker.vm_hwm_kib, .drain.broker.vm_hwm_kib] | map(select(. != null)) | max) / 1024
	elif $k == "hwm" then .perf.broker.vm_hwm_kib / 1024
	elif $k == "s6_disk" then .disk_bytes / 1000000
	elif $k == "s6_recover" then .recover_s
	elif $k == "per_conn" then (.perf.broker.rss_end_kib - .rss_before_kib) / .perf.config.idle_connections
	elif $k == "declare_rate" then .perf.config.fanout_queues / (.wall_s - .perf.duration_s)
	elif $k == "per_queue" then (.perf.broker.rss_end_kib - .rss_before_kib) / .perf.config.fanout_queues
	elif $k == "p999" then .perf.latency_us.p999
	elif $k == "replay_rate" then .perf.stream.replay_rate
	elif $k == "consumer_min" then .perf.stream.consumer_rate_min
	elif $k == "replay_s" then .perf.stream.replay_s
	elif $k == "cpu_pub" then .perf.broker.cpu_us_per_published
	elif $k == "cpu_publish_phase" then .perf.stream.broker_cpu_publish_us_per_msg
	elif $k == "cpu_replay_phase" then .perf.stream.broker_cpu_replay_us_per_msg
	elif $k == "write_amp" then .perf.broker.write_bytes_per_body_byte
	else null end) catch null;
[
 {s:"S1", f:"throughput, msg/s delivered", k:"consume_rate", goal:"≥ 1.8×", op:"ge", t:1.8},
 {s:"S1", f:"broker CPU, µs/msg", k:"cpu", goal:"≤ 0.2×", op:"le", t:0.2},
 {s:"S1", f:"broker allocations, per msg", k:"allocs"},
 {s:"S1", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S1", f:"broker context switches, per msg", k:"ctxsw"},
 {s:"S1", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S1", f:"latency p99, µs", k:"p99"},
 {s:"S2", f:"throughput, msg/s delivered", k:"consume_rate", goal:"≥ 2×", op:"ge", t:2},
 {s:"S2", f:"broker CPU, µs/msg", k:"cpu", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S2", f:"broker allocations, per msg", k:"allocs"},
 {s:"S2", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S2", f:"broker context switches, per msg", k:"ctxsw"},
 {s:"S2", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S2", f:"latency p99, µs", k:"p99"},
 {s:"S3", f:"throughput, msg/s delivered", k:"consume_rate", goal:"≥ 2× (fsync before every confirm)", op:"ge", t:2},
 {s:"S3", f:"publish rate (confirmed), msg/s", k:"publish_rate"},
 {s:"S3", f:"broker CPU, µs/msg", k:"cpu", goal:"≤ 0.5×", op:"le", t:0.5},
 {s:"S3", f:"broker allocations, per msg", k:"allocs"},
 {s:"S3", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S3", f:"broker context switches, per msg", k:"ctxsw"},
 {s:"S3", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S3", f:"latency p99, µs", k:"p99"},
 {s:"S4", f:"deliveries/s", k:"consume_rate", goal:"≥ 2.5×", op:"ge", t:2.5},
 {s:"S4", f:"broker CPU, µs/delivery", k:"cpu", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S4", f:"broker allocations, per delivery", k:"allocs"},
 {s:"S4", f:"broker system calls, per delivery", k:"syscalls"},
 {s:"S4", f:"broker context switches, per delivery", k:"ctxsw"},
 {s:"S4", f:"railmq-perf CPU, µs/delivery", k:"perf_cpu"},
 {s:"S5", f:"latency p99 at 5,000 msg/s, µs", k:"p99", goal:"≤ 0.5×", op:"le", t:0.5},
 {s:"S5", f:"broker CPU, µs/msg", k:"cpu", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S5", f:"broker allocations, per msg", k:"allocs"},
 {s:"S5", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S5", f:"broker context switches, per msg", k:"ctxsw"},
 {s:"S5", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S5", f:"latency p50, µs", k:"p50"},
 {s:"S5", f:"achieved rate, msg/s delivered", k:"consume_rate"},
 {s:"S6", f:"publish rate, msg/s", k:"publish_rate", goal:"≥ 2×", op:"ge", t:2},
 {s:"S6", f:"broker CPU while publishing, µs/msg", k:"cpu"},
 {s:"S6", f:"broker allocations, per msg published", k:"allocs"},
 {s:"S6", f:"broker system calls, per msg published", k:"syscalls"},
 {s:"S6", f:"broker context switches, per msg published", k:"ctxsw"},
 {s:"S6", f:"railmq-perf CPU while publishing, µs/msg", k:"perf_cpu"},
 {s:"S6", f:"drain rate, msg/s", k:"s6_drain", goal:"≥ 2×", op:"ge", t:2},
 {s:"S6", f:"peak RSS (VmHWM), MiB", k:"s6_peak", goal:"railmq < 256 MiB", op:"abs_lt", t:256},
 {s:"S6", f:"data directory with the backlog, MB", k:"s6_disk"},
 {s:"S6", f:"restart after kill -9 with the backlog, s until accepting connections", k:"s6_recover"},
 {s:"S7", f:"memory per connection, KiB", k:"per_conn", goal:"≤ 0.2×", op:"le", t:0.2},
 {s:"S8", f:"declare rate, queues/s", k:"declare_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S8", f:"memory per queue, KiB", k:"per_queue", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S9", f:"peak RSS (VmHWM), MiB", k:"hwm", goal:"railmq < 256 MiB", op:"abs_lt", t:256},
 {s:"S9", f:"deliveries/s", k:"consume_rate", goal:"≥ 2.5×", op:"ge", t:2.5},
 {s:"S9", f:"consumers' latency p99, µs", k:"p99", goal:"≤ 1×", op:"le", t:1},
 {s:"S9", f:"broker CPU, µs/delivery", k:"cpu"},
 {s:"S9", f:"broker allocations, per delivery", k:"allocs"},
 {s:"S9", f:"broker system calls, per delivery", k:"syscalls"},
 {s:"S9", f:"broker context switches, per delivery", k:"ctxsw"},
 {s:"S9", f:"railmq-perf CPU, µs/delivery", k:"perf_cpu"},
 {s:"S10", f:"throughput, msg/s delivered", k:"consume_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S10", f:"publish rate (confirmed), msg/s", k:"publish_rate"},
 {s:"S10", f:"broker CPU, µs/msg", k:"cpu", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S10", f:"broker allocations, per msg", k:"allocs"},
 {s:"S10", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S10", f:"broker context switches, per msg", k:"ctxsw"},
 {s:"S10", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S10", f:"latency p99, µs", k:"p99"},
 {s:"S10", f:"railmq only: quorum (S10, left) vs classic durable (S3, right), msg/s delivered", k:"consume_rate", vs:"S3", goal:"≥ 0.67× (within 1.5×)", op:"ge", t:0.67},
 {s:"S10", f:"railmq only: quorum (S10, left) vs classic durable (S3, right), latency p99, µs", k:"p99", vs:"S3"},
 {s:"S11", f:"publish rate (confirmed), msg/s", k:"publish_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S11", f:"replay rate, 3 consumers together, msg/s delivered", k:"consume_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S11", f:"slowest consumer, msg/s", k:"consumer_min"},
 {s:"S11", f:"broker CPU, µs/msg delivered", k:"cpu", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S11", f:"broker CPU, µs/msg published", k:"cpu_pub", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S11", f:"broker disk writes per body byte published", k:"write_amp", goal:"railmq ≤ 1.5", op:"abs_le", t:1.5},
 {s:"S11", f:"peak RSS, MiB", k:"rss_peak"},
 {s:"S11", f:"broker allocations, per msg", k:"allocs"},
 {s:"S11", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S11", f:"broker context switches, per msg", k:"ctxsw"},
 {s:"S11", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S11", f:"latency p99 (consumers on first, at the tail), µs", k:"p99"},
 {s:"S12", f:"replay rate, 3 consumers together, msg/s delivered", k:"replay_rate", goal:"railmq ≥ 500,000", op:"abs_ge", t:500000},
 {s:"S12", f:"replay rate, ratio", k:"replay_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S12", f:"slowest consumer, msg/s", k:"consumer_min"},
 {s:"S12", f:"replay time, s", k:"replay_s"},
 {s:"S12", f:"broker CPU while replaying, µs/msg delivered", k:"cpu_replay_phase", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S12", f:"publish rate (confirmed), msg/s", k:"publish_rate"},
 {s:"S12", f:"broker CPU while publishing, µs/msg", k:"cpu_publish_phase"},
 {s:"S12", f:"broker disk writes per body byte published", k:"write_amp"},
 {s:"S12", f:"peak RSS, MiB", k:"rss_peak"},
 {s:"S12", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"},
 {s:"S13", f:"latency p99 at 5,000 msg/s, consumer on next, µs", k:"p99", goal:"< 1× (railmq's below RabbitMQ's)", op:"lt", t:1},
 {s:"S13", f:"latency p50, µs", k:"p50"},
 {s:"S13", f:"latency p99.9, µs", k:"p999"},
 {s:"S13", f:"achieved rate, msg/s delivered", k:"consume_rate"},
 {s:"S13", f:"broker CPU, µs/msg", k:"cpu"},
 {s:"S13", f:"broker system calls, per msg", k:"syscalls"},
 {s:"S13", f:"broker disk writes per body byte published", k:"write_amp"},
 {s:"S14", f:"publish rate (confirmed), msg/s", k:"publish_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S14", f:"replay rate, 3 consumers together, msg/s delivered", k:"replay_rate", goal:"≥ 3×", op:"ge", t:3},
 {s:"S14", f:"slowest consumer, msg/s", k:"consumer_min"},
 {s:"S14", f:"broker CPU while publishing, µs/msg", k:"cpu_publish_phase", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S14", f:"broker CPU while replaying, µs/msg delivered", k:"cpu_replay_phase", goal:"≤ 0.3×", op:"le", t:0.3},
 {s:"S14", f:"broker disk writes per body byte published", k:"write_amp", goal:"railmq ≤ 1.5", op:"abs_le", t:1.5},
 {s:"S14", f:"peak RSS, MiB", k:"rss_peak"},
 {s:"S14", f:"railmq-perf CPU, µs/msg", k:"perf_cpu"}
] as $rows
| . as $runs
| if $goals then
    "| Scenario | Figure | \($la) | \($lb) | \($rh) | Goal | Result |",
    "|---|---|--:|--:|--:|---|---|"
  else
    "| Scenario | Figure | \($la) | \($lb) | \($rh) |",
    "|---|---|--:|--:|--:|"
  end,
  ($rows[] | . as $row
   | [$runs[] | select(.scenario == $row.s)] as $rs
   | select($rs | length > 0)
   | ([$rs[] | select(.broker == "railmq") | fig($row.k)] | med) as $a
   | (if $row.vs then [$runs[] | select(.scenario == $row.vs and .broker == "railmq") | fig($row.k)]
      else [$rs[] | select(.broker == $other) | fig($row.k)] end | med) as $q
   | (if $a != null and $q != null and $q != 0 then $a / $q else null end) as $ratio
   | (if $row.op == "abs_lt" then (if $a == null then "n/a" elif $a < $row.t then "PASS" else "FAIL" end)
      elif $row.op == "abs_le" then (if $a == null then "n/a" elif $a <= $row.t then "PASS" else "FAIL" end)
      elif $row.op == "abs_ge" then (if $a == null then "n/a" elif $a >= $row.t then "PASS" else "FAIL" end)
      elif $row.op == null then ""
      elif $ratio == null then "n/a"
      elif $row.op == "ge" then (if $ratio >= $row.t then "PASS" else "FAIL" end)
      elif $row.op == "lt" then (if $ratio < $row.t then "PASS" else "FAIL" end)
      else (if $ratio <= $row.t then "PASS" else "FAIL" end) end) as $res
   | "| \($row.s) | \($row.f) | \($a | num) | \($q | num) | \(if $ratio == null then "–" else ($ratio * 100 | round / 100 | tostring) + "×" end) |"
     + (if $goals then " \($row.goal // "") | \($res) |" else "" end))
JQ
read -r -d '' VERIFY <<'JQ' || true
"| Scenario | Broker | runs | exit ≠ 0 | lost | duplicated | unreceived | errors |",
"|---|---|--:|--:|--:|--:|--:|--:|",
(group_by([.scenario, .broker])[] | . as $g
 | "| \($g[0].scenario) | \($g[0].broker) | \($g | length) | \([$g[] | select(.exit != 0 or ((.drain_exit // 0) != 0))] | length) | \([$g[] | (.perf.lost // 0) + (if .drain then ([(.perf.confirmed // 0) - (.drain.consumed // 0), 0] | max) else 0 end)] | add) | \([$g[].perf.duplicated // 0] | add) | \([$g[].perf.unreceived // 0] | add) | \([$g[] | (.perf.errors // 0) + (.drain.errors // 0)] | add) |")
JQ
GOALS=true
[ -z "$AGAINST" ] || GOALS=false
TABLE=$(jq -rs --arg other "$OTHER" --arg la "$LABEL_A" --arg lb "$LABEL_B" --arg rh "$RATIO_HEAD" --argjson goals "$GOALS" "$REPORT" "$RAW")
VTABLE=$(jq -rs "$VERIFY" "$RAW")
if [ -z "$AGAINST" ]; then
	NOFILES=$(jq -rs '[.[] | .open_files_limit // empty] | unique | map(tostring) | join(", ")' "$RAW")
	[ -n "$NOFILES" ] || NOFILES="(no RabbitMQ run)"
	NOFILE_NOTE="RabbitMQ's open-file limit (soft, from /proc/PID/limits): $NOFILES"
	[[ "$NOFILES" == "65536" ]] || NOFILE_NOTE="$NOFILE_NOTE; \`ulimit -n 65536\` was refused in this sandbox, so the node ran with its hard limit"
fi

# The generated part of RESULTS (between the markers).
GEN=$TMP/generated.md
{
	echo "## $TITLE_LINE: the last run"
	echo
	echo "Written by \`bench/compare.sh\` (\`make bench-compare${AGAINST:+ AGAINST=$AGAINST}\`) on $(date -u '+%Y-%m-%d %H:%M UTC'); the run took ${ELAPSED}s."
	echo
	echo "- Machine: $MACHINE; load average at the start: $LOAD_START (the machine may be shared)"
	if [ -n "$AGAINST" ]; then
		echo "- railmq (HEAD): $RAILMQ_VERSION; railmq ($AGAINST): $AGAINST_SHA, from \`git archive\`; both \`go build -trimpath -ldflags=-s\` with $GO_VERSION, \`--listen 127.0.0.1:PORT --data-dir DIR --log-level warn\`; railmq-perf is HEAD's for both"
	else
		echo "- railmq: $RAILMQ_VERSION (\`go build -trimpath -ldflags=-s\`, $GO_VERSION), \`--listen 127.0.0.1:PORT --data-dir DIR --log-level warn\`"
		echo "- RabbitMQ: $RABBIT_VERSION (Debian), Erlang $ERLANG_VERSION, default configuration, no plugins, \`rabbitmq-server -detached\` as user rabbitmq"
		echo "- $NOFILE_NOTE"
	fi
	echo "- ROUNDS=$ROUNDS (S6_ROUNDS=$S6_ROUNDS, S9_ROUNDS=$S9_ROUNDS), DURATION=$D, S9_DURATION=$D9, S5_DURATION=$D5, S7_DURATION=$D7, S6_MESSAGES=$S6_MESSAGES, S7_CONNECTIONS=$S7_CONNECTIONS, S8_QUEUES=$S8_QUEUES, S12_MESSAGES=$S12_MESSAGES, S14_MESSAGES=$S14_MESSAGES, SCENARIOS=\"$SCENARIOS\""
	echo "- railmq-perf engine: \`--engine $ENGINE\`"
	echo "- Raw railmq-perf JSON, one line per run: \`$RAW\`"
	echo
	echo "Every run starts its broker afresh (new data directory), waits ${SETTLE}s, runs railmq-perf, and stops the broker by its pid (SIGTERM)."
	echo "The two brokers run one after the other; the one that goes first alternates each round. Figures are medians across rounds."
	echo
	echo "### Results"
	echo
	echo "$TABLE"
	echo
	echo "### Verification (sums over all runs)"
	echo
	echo "$VTABLE"
	echo
	echo "### Scenarios"
	echo
	echo "Every railmq-perf run adds \`--uri amqp://guest:guest@127.0.0.1:PORT/ --json --broker-pid PID\`$([ -n "$AGAINST" ] || echo " (RabbitMQ: the beam.smp pid from RABBITMQ_PID_FILE)")."
	echo
	for s in $SCENARIOS; do
		echo "- **$s** ${TITLE[$s]}: \`railmq-perf ${FLAGS[$s]}\`"
		if [ -n "${DRAIN_FLAGS[$s]:-}" ]; then echo "  then \`railmq-perf ${DRAIN_FLAGS[$s]}\`"; fi
	done
	echo
	echo "How figures are derived from the JSON:"
	echo
	echo "- throughput and deliveries/s: \`consume_rate\` (deliveries from the start to the last delivery); broker CPU: \`broker.cpu_us_per_msg\` (utime+stime of the broker process per delivery); railmq-perf CPU: \`perf_cpu_us_per_msg\` (the tool's own, getrusage, producers and consumers together, per delivery)."
	echo "- Broker allocations, system calls and context switches are counted by the script around each railmq-perf run (connections, declares and teardown included) and divided by the deliveries (publishes when nothing was consumed): allocations from railmq's \`go_memstats_mallocs_total\` (\`--prometheus-listen\`; RabbitMQ: n/a), system calls and context switches with $([ "$SYS_METHOD" = perf ] && echo "\`perf stat -e raw_syscalls:sys_enter,context-switches -p PID\`" || echo "/proc (system calls: only reads and writes, syscr+syscw of /proc/PID/io; context switches: voluntary+nonvoluntary summed over /proc/PID/task/*/status)")."
	echo "- S6: publish rate is \`publish_rate\` of the first run, drain rate \`drain_rate\` of the second; peak RSS is the larger VmHWM (lifetime peak) at the end of the two runs (railmq: of the process killed after publishing and of the restarted one); the data directory is \`du -sb\` of it after publishing (railmq's \`--data-dir\`, RabbitMQ's mnesia base); the restart time is from starting railmq again on the killed broker's data directory to its accepting connections (recovery included), railmq only, and railmq's drain runs against the restarted broker."
	echo "- Verification: in S6, \"lost\" also counts confirmed messages the drain did not receive (after railmq's restart, too)."
	echo "- S7: (\`broker.rss_end_kib\` with the connections open − VmRSS read by the script just before railmq-perf started) / connections. railmq-perf's own \`rss_start_kib\` is sampled after its connections are open, so it is not used."
	echo "- S8: declare rate = queues / (wall time of the railmq-perf run − its \`duration_s\`), i.e. connecting plus one queue.declare and one queue.bind per queue; memory per queue = (\`broker.rss_end_kib\` − VmRSS before the run) / queues. The one message goes through the fanout exchange, so each queue holds one."
	if [[ " $SCENARIOS " == *" S1"[1-4]" "* ]]; then
		echo "- S11-S14 (streams): every consumer reads the whole stream, so deliveries = consumers × published and railmq-perf checks lost, duplicated and out-of-order messages per consumer. Replay rate: all consumers' deliveries over the time from their start (S11: the run's start; S12, S14: the first basic.consume, after every publish was confirmed) to the last delivery (\`stream.replay_rate\`; S11's \`consume_rate\` is the same figure); slowest consumer: the lowest of the consumers' own rates. Broker CPU per message delivered and per message published: the run's utime+stime over deliveries or publishes; S12 and S14 split it into the publishing phase (per message published) and the replay phase (per delivery). Disk writes per body byte: \`write_bytes\` of the broker's /proc/PID/io during the run (bytes it caused to be written to storage: data, indexes, logs, metadata) over published × body size. S13's latency is a consumer on \`next\`, send to receipt, with p99.9 beside p50 and p99."
	fi
} >"$GEN"

# RESULTS: what was before BEGIN, the generated part, what was after END; a
# new file gets a title and the rule.
if [ -e "$RESULTS" ] && ! markers_ok "$RESULTS"; then
	cp "$GEN" "$RESULTS.generated"
	die "$RESULTS lost its markers during the run; the generated part is in $RESULTS.generated"
fi
{
	if [ -e "$RESULTS" ]; then
		awk -v B="$BEGIN_MARK" '$0 == B {exit} {print}' "$RESULTS"
	else
		echo "# $TITLE_LINE"
		echo
		echo "\`bench/compare.sh\` rewrites only the lines between the BEGIN GENERATED and END GENERATED markers; everything before and after them is hand-written and kept."
		echo
	fi
	echo "$BEGIN_MARK"
	cat "$GEN"
	echo "$END_MARK"
	if [ -e "$RESULTS" ]; then awk -v E="$END_MARK" 'f {print} $0 == E {f = 1}' "$RESULTS"; fi
} >"$TMP/results.md"
cat "$TMP/results.md" >"$RESULTS"

echo "$TABLE" >&3
echo >&3
echo "$VTABLE" >&3
say "wrote $RESULTS and $RAW (${ELAPSED}s)"
