#!/usr/bin/env bash
# compat-clients.sh: run our own checks of two more client libraries,
# Python pika (Debian's python3-pika) and Ruby bunny (Debian's ruby-bunny),
# against a freshly built railmq (scripts/clients/*: each expectation there
# was taken from RabbitMQ 3.10.8 side by side; pika_plugins.py's, for the
# built-in plugin features, from the plugins' READMEs and sources), and
# summarise.
#
#   scripts/compat-clients.sh            (part of: make compat)
#
# Exit status: 0 when every failing check is listed in
# scripts/compat-clients-expected-failures.txt, 1 otherwise, 2 on a setup
# error. Environment: GO (default go), COMPAT_LOG_DIR (default $TMPDIR or
# /tmp), COMPAT_CLIENTS_URL (run against that broker instead of starting
# railmq, e.g. amqp://guest:guest@127.0.0.1:5673/ for RabbitMQ).
set -uo pipefail

GO=${GO:-go}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_DIR=${COMPAT_LOG_DIR:-${TMPDIR:-/tmp}}
ALLOWLIST=$ROOT/scripts/compat-clients-expected-failures.txt
BROKER_LOG=$LOG_DIR/railmq-compat-clients-broker.log
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh" compat-clients railmq-clients

# --- the clients (Debian's packages) ----------------------------------------
PY=/usr/bin/python3
if ! "$PY" -c 'import pika' 2>/dev/null || ! /usr/bin/ruby -e 'require "bunny"' 2>/dev/null; then
	say "installing python3-pika and ruby-bunny from apt"
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pika ruby-bunny) >"$TMP/apt.log" 2>&1 ||
		{ tail -n 20 "$TMP/apt.log" >&2; die "apt-get install python3-pika ruby-bunny failed"; }
fi
say "pika $("$PY" -c 'import pika; print(pika.__version__)'), bunny $(/usr/bin/ruby -e 'require "bunny"; print Bunny::VERSION')"

# --- the broker ---------------------------------------------------------------
if [ -n "${COMPAT_CLIENTS_URL:-}" ]; then
	URL=$COMPAT_CLIENTS_URL
else
	cd "$ROOT" || die "cannot cd to $ROOT"
	"$GO" build -o "$TMP/railmq" ./cmd/railmq || die "go build ./cmd/railmq failed"
	PORT=$(free_port 5700 5720)
	[ -n "$PORT" ] || die "no free port in 5700..5720"
	"$TMP/railmq" --listen "127.0.0.1:$PORT" --data-dir "$TMP/data" >"$BROKER_LOG" 2>&1 &
	BROKER_PID=$!
	wait_listening "$PORT"
	URL="amqp://guest:guest@127.0.0.1:$PORT/"
	say "broker pid $BROKER_PID on 127.0.0.1:$PORT (log: $BROKER_LOG)"
fi

# --- the checks ---------------------------------------------------------------
cd "$ROOT/scripts/clients" || die "no scripts/clients"
timeout 300 "$PY" pika_check.py "$URL" >"$LOG_DIR/railmq-compat-pika.log" 2>&1
# railmq's built-in plugin features (delayed, retry, dedup, consistent hash)
timeout 300 "$PY" pika_plugins.py "$URL" >"$LOG_DIR/railmq-compat-pika-plugins.log" 2>&1
timeout 300 /usr/bin/ruby bunny_check.rb "$URL" >"$LOG_DIR/railmq-compat-bunny.log" 2>&1
ALLOWED=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$ALLOWLIST" 2>/dev/null | sort -u)
pass=0 fail=0 unexp=0
for lib in pika pika-plugins bunny; do
	log=$LOG_DIR/railmq-compat-$lib.log
	n=$(grep -c '^ok ' "$log")
	pass=$((pass + n))
	if ! grep -qE '^[0-9]+ checks, [0-9]+ failed$' "$log"; then
		say "$lib: the script did not finish (last lines of $log):"
		tail -n 15 "$log"
		fail=$((fail + 1)) unexp=$((unexp + 1))
	fi
	while IFS= read -r line; do
		name=${line#FAIL }
		name=${name%%:*}
		fail=$((fail + 1))
		if grep -qxF "$lib $name" <<<"$ALLOWED"; then
			echo "  [expected]   $lib $name"
		else
			echo "  [UNEXPECTED] $lib ${line#FAIL }" | cut -c1-400
			unexp=$((unexp + 1))
		fi
	done < <(grep '^FAIL ' "$log")
done
echo
echo "==== pika/bunny compat summary: $pass passed, $fail failed"
say "logs: $LOG_DIR/railmq-compat-pika.log, $LOG_DIR/railmq-compat-pika-plugins.log, $LOG_DIR/railmq-compat-bunny.log"
finish "$unexp"
