# shellcheck shell=bash
# lib.sh: what the compat scripts and the benchmarks (bench/compare.sh,
# bench/cluster.sh) share: messages, a temp dir, starting checks and
# stopping of the broker they run, and railmq built at another revision.
#
#   . scripts/lib.sh NAME TMP-PREFIX
#
# defines say and die (lines prefixed "NAME: "), makes $LOG_DIR (when set)
# and a temp dir $TMP, and on exit runs the caller's at_exit function (when
# it defines one), stops the broker started as $BROKER_PID and removes $TMP
# (kept with COMPAT_KEEP_TMP=1). The functions work under set -e too.

LIB_NAME=$1
say() { printf '%s: %s\n' "$LIB_NAME" "$*"; }
die() { printf '%s: error: %s\n' "$LIB_NAME" "$*" >&2; exit 2; }

BROKER_PID=
if [ -n "${LOG_DIR:-}" ]; then mkdir -p "$LOG_DIR" || die "cannot create $LOG_DIR"; fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX") || die "mktemp failed"

cleanup() {
	local rc=$?
	trap - EXIT
	if declare -F at_exit >/dev/null; then at_exit || true; fi
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

# alive PID: the process runs (a zombie, which a broker that daemonized
# itself can leave behind when nothing reaps it, does not count).
alive() {
	kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# stop_broker stops the broker started as $BROKER_PID (our child or not):
# SIGTERM, then SIGKILL after $STOP_GRACE seconds (default 10).
stop_broker() {
	local i
	if [ -n "$BROKER_PID" ] && alive "$BROKER_PID"; then
		kill -TERM "$BROKER_PID" 2>/dev/null || true
		for ((i = 0; i < ${STOP_GRACE:-10} * 10; i++)); do
			alive "$BROKER_PID" || break
			sleep 0.1
		done
		if alive "$BROKER_PID"; then
			say "broker (pid $BROKER_PID) ignored SIGTERM for ${STOP_GRACE:-10}s; sending SIGKILL"
			kill -KILL "$BROKER_PID" 2>/dev/null || true
		fi
	fi
	if [ -n "$BROKER_PID" ]; then wait "$BROKER_PID" 2>/dev/null || true; fi
	BROKER_PID=
}

# port_open HOST PORT: something accepts connections on HOST:PORT.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# free_port FROM TO [AVOID...]: prints the first port in FROM..TO that
# nothing listens on at 127.0.0.1 and that is not one of AVOID, or nothing.
free_port() {
	local p from=$1 to=$2
	shift 2
	for p in $(seq "$from" "$to"); do
		[[ " $* " == *" $p "* ]] && continue
		port_open 127.0.0.1 "$p" || { echo "$p"; return 0; }
	done
}

# wait_listening PORT [SECONDS]: waits up to SECONDS (default 30) for the
# broker ($BROKER_PID, log $BROKER_LOG) to accept connections on
# 127.0.0.1:PORT; dies if it exits or never does.
wait_listening() {
	local i
	for ((i = 0; i < ${2:-30} * 10; i++)); do
		port_open 127.0.0.1 "$1" && return 0
		kill -0 "$BROKER_PID" 2>/dev/null || { tail -n 20 "$BROKER_LOG" >&2; die "broker exited during start-up"; }
		sleep 0.1
	done
	die "broker did not accept connections on 127.0.0.1:$1 within ${2:-30}s"
}

# head_version: HEAD's short commit id, with " + uncommitted changes" when
# the work tree differs from it outside bench/ (what a benchmark builds).
head_version() {
	local v
	v=$(git rev-parse --short HEAD)
	git diff --quiet HEAD -- . ':(exclude)bench' 2>/dev/null || v="$v + uncommitted changes"
	echo "$v"
}

# against_rev REV: sets AGAINST_SHA to the short commit id of the git
# revision REV (a commit, tag, branch, HEAD~1); dies when REV names none.
against_rev() {
	AGAINST_SHA=$(git rev-parse --verify --quiet --short "$1^{commit}") || die "AGAINST=$1: not a commit"
}

# build_railmq_at SHA OUT: builds cmd/railmq as of commit SHA into OUT (an
# absolute path) as the benchmarks build HEAD's (go build -trimpath
# -ldflags=-s, with $GO, default go), from `git archive SHA` unpacked in
# $TMP and removed after: the repository is only read.
build_railmq_at() {
	local src="$TMP/src-$1"
	mkdir -p "$src"
	git archive "$1" | tar -x -C "$src"
	(cd "$src" && "${GO:-go}" build -trimpath -ldflags=-s -o "$2" ./cmd/railmq)
	rm -rf "$src"
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
