#!/usr/bin/env bash
# Backlog benchmark ([3/5]): publish N x SIZE persistent messages with
# confirms and no consumer, then drain with 4 consumers; report publish
# rate, drain rate, the broker's peak RSS and disk use, for railmq and for
# RabbitMQ on the same machine in the same run. railmq's recovery time
# after kill -9 with the backlog in place is measured too.
#
#   bash bench/backlog.sh [N] [SIZE]     (default 1000000 1024)
#
# Needs Debian's rabbitmq-server (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
SIZE=${2:-1024}
TMP=$(mktemp -d /tmp/railmq-backlog.XXXXXX)
OUT=${OUT:-bench/backlog-$(date +%Y%m%d-%H%M%S).jsonl}
say() { printf 'backlog: %s\n' "$*" >&2; }

go build -o "$TMP/railmq" ./cmd/railmq
go build -o "$TMP/perf" ./cmd/railmq-perf
wait_port() { for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
hwm() { awk '/VmHWM/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

publish() { # uri pid
	"$TMP/perf" --uri "$1" --producers 1 --consumers 0 --pmessages "$N" --size "$SIZE" --persistent --confirm 256 \
		--queue-prefix backlog --json --broker-pid "$2"
}
drain() { # uri pid
	"$TMP/perf" --uri "$1" --producers 0 --consumers 4 --predeclared --drain --prefetch 300 --multi-ack-every 50 \
		--queue-prefix backlog --json --broker-pid "$2"
}

# --- railmq ----------------------------------------------------------------
RPORT=5685
start_railmq() {
	"$TMP/railmq" --listen 127.0.0.1:$RPORT --data-dir "$TMP/railmq-data" --log-format json >>"$TMP/railmq.log" 2>&1 &
	RPID=$!
}
say "railmq: publishing $N x $SIZE B"
start_railmq
wait_port $RPORT
P=$(publish "amqp://guest:guest@127.0.0.1:$RPORT/" $RPID)
DISK=$(du -sb "$TMP/railmq-data" | cut -f1)
HWM1=$(hwm $RPID)
say "railmq: kill -9 with the backlog, then restart"
kill -9 $RPID; wait $RPID 2>/dev/null || true
T0=$(date +%s.%N)
start_railmq
wait_port $RPORT
T1=$(date +%s.%N)
RECOVER=$(echo "$T1 - $T0" | bc)
say "railmq: recovered in ${RECOVER}s; draining"
D=$(drain "amqp://guest:guest@127.0.0.1:$RPORT/" $RPID)
HWM2=$(hwm $RPID)
DISK_AFTER=$(du -sb "$TMP/railmq-data" | cut -f1)
kill $RPID; wait $RPID 2>/dev/null || true
printf '{"broker":"railmq","n":%s,"size":%s,"publish":%s,"drain":%s,"disk_bytes":%s,"disk_after_drain_bytes":%s,"recover_s":%s,"vm_hwm_kib_publish":%s,"vm_hwm_kib_after_restart":%s}\n' \
	"$N" "$SIZE" "$P" "$D" "$DISK" "$DISK_AFTER" "$RECOVER" "$HWM1" "$HWM2" | tee -a "$OUT"

# --- RabbitMQ ----------------------------------------------------------------
if ! command -v rabbitmq-server >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
fi
QPORT=5686
export RABBITMQ_NODENAME=backlog@localhost RABBITMQ_NODE_PORT=$QPORT RABBITMQ_DIST_PORT=25686 \
	RABBITMQ_MNESIA_BASE="$TMP/rmq-mnesia" RABBITMQ_LOG_BASE="$TMP/rmq-log" RABBITMQ_PID_FILE="$TMP/rmq.pid" \
	RABBITMQ_ENABLED_PLUGINS_FILE="$TMP/rmq-plugins" RABBITMQ_CONFIG_FILE="$TMP/rmq"
echo '[].' >"$TMP/rmq-plugins"
mkdir -p "$TMP/rmq-mnesia" "$TMP/rmq-log"
chown -R rabbitmq:rabbitmq "$TMP" 2>/dev/null || true
say "RabbitMQ: starting a fresh node on $QPORT"
rabbitmq-server -detached >/dev/null 2>&1
wait_port $QPORT
QPID=$(cat "$TMP/rmq.pid")
say "RabbitMQ: publishing $N x $SIZE B (beam pid $QPID)"
P=$(publish "amqp://guest:guest@127.0.0.1:$QPORT/" "$QPID")
DISK=$(du -sb "$TMP/rmq-mnesia" | cut -f1)
say "RabbitMQ: draining"
D=$(drain "amqp://guest:guest@127.0.0.1:$QPORT/" "$QPID")
HWM=$(hwm "$QPID")
DISK_AFTER=$(du -sb "$TMP/rmq-mnesia" | cut -f1)
rabbitmqctl -n backlog@localhost stop >/dev/null 2>&1 || kill "$QPID"
printf '{"broker":"rabbitmq","version":"%s","n":%s,"size":%s,"publish":%s,"drain":%s,"disk_bytes":%s,"disk_after_drain_bytes":%s,"vm_hwm_kib":%s}\n' \
	"$(dpkg-query -W -f='${Version}' rabbitmq-server)" "$N" "$SIZE" "$P" "$D" "$DISK" "$DISK_AFTER" "$HWM" | tee -a "$OUT"
rm -rf "$TMP"
