# lib.sh: what the compat scripts share.
#
#   . scripts/lib.sh NAME TMP-PREFIX
#
# defines say and die (lines prefixed "NAME: "), makes $LOG_DIR and a temp
# dir $TMP, and on exit stops the broker started as $BROKER_PID and
# removes $TMP (kept with COMPAT_KEEP_TMP=1).

LIB_NAME=$1
say() { printf '%s: %s\n' "$LIB_NAME" "$*"; }
die() { printf '%s: error: %s\n' "$LIB_NAME" "$*" >&2; exit 2; }

BROKER_PID=
mkdir -p "$LOG_DIR" || die "cannot create $LOG_DIR"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX") || die "mktemp failed"

cleanup() {
	local rc=$?
	stop_broker
	if [ "${COMPAT_KEEP_TMP:-}" = 1 ]; then
		say "kept $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop_broker stops the broker started as $BROKER_PID: SIGTERM, then
# SIGKILL after 10 s.
stop_broker() {
	if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
		kill -TERM "$BROKER_PID" 2>/dev/null
		for _ in $(seq 1 50); do
			kill -0 "$BROKER_PID" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$BROKER_PID" 2>/dev/null; then
			say "broker (pid $BROKER_PID) ignored SIGTERM for 10s; sending SIGKILL"
			kill -KILL "$BROKER_PID" 2>/dev/null
		fi
	fi
	[ -n "$BROKER_PID" ] && wait "$BROKER_PID" 2>/dev/null
	BROKER_PID=
}

# port_open HOST PORT: something accepts connections on HOST:PORT.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# free_port FROM TO: prints the first port in FROM..TO that nothing
# listens on at 127.0.0.1, or nothing.
free_port() {
	local p
	for p in $(seq "$1" "$2"); do
		port_open 127.0.0.1 "$p" || { echo "$p"; return; }
	done
}

# wait_listening PORT: waits up to 30 s for the broker ($BROKER_PID, log
# $BROKER_LOG) to accept connections on 127.0.0.1:PORT; dies if it exits
# or never does.
wait_listening() {
	for _ in $(seq 1 150); do
		port_open 127.0.0.1 "$1" && return
		kill -0 "$BROKER_PID" 2>/dev/null || { tail -n 20 "$BROKER_LOG" >&2; die "broker exited during start-up"; }
		sleep 0.2
	done
	die "broker did not accept connections on 127.0.0.1:$1 within 30s"
}

# finish N: exits 1 if N unexpected failures were counted, else 0.
finish() {
	if [ "$1" != 0 ]; then
		say "FAIL: $1 unexpected failure(s)"
		exit 1
	fi
	say "OK: no unexpected failures"
	exit 0
}
