#!/usr/bin/env bash
# compat.sh: run the amqp091-go client library's own integration test suite
# against a freshly built railmq, and summarise the result.
#
#   scripts/compat.sh            (or: make compat)
#
# The module github.com/rabbitmq/amqp091-go@$AMQP091_VERSION is copied out of
# the Go module cache into a temp dir (fetched through the module proxy if it
# is not there yet); nothing of it is copied into this repository.
#
# Exit status: 0 when every failing test is listed in
# scripts/compat-expected-failures.txt, 1 when some other test failed (or
# hung, or the package failed outside any test), 2 on a setup error.
#
# Environment:
#   GO                 go command (default: go)
#   AMQP091_VERSION    client version (default: v1.16.0)
#   COMPAT_PORT        broker port on 127.0.0.1 (default: first free from 5679)
#   COMPAT_TIMEOUT     go test -timeout (default: 5m)
#   COMPAT_RUN         optional go test -run pattern (default: run everything)
#   COMPAT_LOG_DIR     where the logs go (default: $TMPDIR or /tmp)
#   COMPAT_KEEP_TMP=1  keep the temp dir (module copy, broker data)
set -uo pipefail

GO=${GO:-go}
AMQP091_VERSION=${AMQP091_VERSION:-v1.16.0}
MODULE=github.com/rabbitmq/amqp091-go
TEST_TIMEOUT=${COMPAT_TIMEOUT:-5m}
LOG_DIR=${COMPAT_LOG_DIR:-${TMPDIR:-/tmp}}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ALLOWLIST=$ROOT/scripts/compat-expected-failures.txt
TEST_LOG=$LOG_DIR/railmq-compat-test.log
BROKER_LOG=$LOG_DIR/railmq-compat-broker.log

# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh" compat railmq-compat


# --- the client module ------------------------------------------------------
cd "$ROOT" || die "cannot cd to $ROOT"
MODDIR=$(GOFLAGS=-mod=mod "$GO" mod download -json "$MODULE@$AMQP091_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[ -n "$MODDIR" ] && [ -d "$MODDIR" ] || die "go mod download $MODULE@$AMQP091_VERSION gave no Dir"
cp -R "$MODDIR" "$TMP/amqp091-go" || die "copy of $MODDIR failed"
chmod -R u+w "$TMP/amqp091-go"
say "client: $MODULE@$AMQP091_VERSION (copied from $MODDIR)"

# --- the broker -------------------------------------------------------------
say "building railmq"
"$GO" build -o "$TMP/railmq" ./cmd/railmq || die "go build ./cmd/railmq failed"
# The suite's memory-alarm test drives rabbitmqctl set_vm_memory_high_watermark:
# railmqctl answers to that name, through the management API.
"$GO" build -o "$TMP/rabbitmqctl" ./cmd/railmqctl || die "go build ./cmd/railmqctl failed"
export RABBITMQ_RABBITMQCTL_PATH="$TMP/rabbitmqctl" RAILMQ_MANAGEMENT_URL=http://127.0.0.1:15672

if [ -n "${COMPAT_PORT:-}" ]; then
	PORT=$COMPAT_PORT
	port_open 127.0.0.1 "$PORT" && die "127.0.0.1:$PORT is already in use"
else
	PORT=$(free_port 5679 5699)
	[ -n "$PORT" ] || die "no free port in 5679..5699 (set COMPAT_PORT)"
fi

# The suite's recovery tests drop connections through the management API,
# which it expects on localhost:15672.
port_open 127.0.0.1 15672 && die "127.0.0.1:15672 is already in use (the suite needs it for the management API)"
mkdir -p "$TMP/data"
# rss: the alarm measures the process, as RabbitMQ's default does, so that
# the suite's tiny watermark (0.0001 of memory) trips it.
"$TMP/railmq" --listen "127.0.0.1:$PORT" --data-dir "$TMP/data" --management-listen 127.0.0.1:15672 \
	--vm-memory-calculation-strategy rss >"$BROKER_LOG" 2>&1 &
BROKER_PID=$!
wait_listening "$PORT"
say "broker pid $BROKER_PID on 127.0.0.1:$PORT (log: $BROKER_LOG)"

# --- the suite ---------------------------------------------------------------
export AMQP_URL="amqp://guest:guest@127.0.0.1:$PORT/"
export GOWORK=off
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
RUN_ARGS=()
[ -n "${COMPAT_RUN:-}" ] && RUN_ARGS=(-run "$COMPAT_RUN")
say "go test -tags integration -count=1 -v -timeout $TEST_TIMEOUT ${RUN_ARGS[*]} ./...  (AMQP_URL=$AMQP_URL)"
say "verbose output: $TEST_LOG"
(cd "$TMP/amqp091-go" && "$GO" test -tags integration -count=1 -v -timeout "$TEST_TIMEOUT" "${RUN_ARGS[@]}" ./...) >"$TEST_LOG" 2>&1
GOTEST_RC=$?

BROKER_ALIVE=1
kill -0 "$BROKER_PID" 2>/dev/null || BROKER_ALIVE=0

# --- summary -----------------------------------------------------------------
# Allowlist: one top-level test name a line; '#' starts a comment.
ALLOWED=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$ALLOWLIST" 2>/dev/null | sort -u)

# Top-level results from the -v output. A test that started but never
# reported (timeout panic, crash) counts as failed ("no result"); a package
# that failed with no failing test (TestMain's goleak check, build error)
# counts as a failure named "PACKAGE:<import path>".
awk -v allowed="$ALLOWED" '
function top(n) { sub(/\/.*/, "", n); return n }
BEGIN { n = split(allowed, a, "\n"); for (i = 1; i <= n; i++) if (a[i] != "") ok[a[i]] = 1 }
/^=== (RUN|CONT|NAME)   / { cur = $3; if ($2 == "RUN" && cur !~ /\//) { if (!(cur in started)) order[++ns] = cur; started[cur] = 1 } ; next }
match($0, /--- (PASS|FAIL|SKIP): [^ ]+ \(/) {
	s = substr($0, RSTART + 4, RLENGTH - 6); res = s; sub(/:.*/, "", res); name = s; sub(/^[A-Z]+: /, "", name)
	if (name !~ /\//) { result[name] = res; if (!(name in started)) { started[name] = 1; order[++ns] = name } ; }
	else if (res == "FAIL") failsub[top(name)] = failsub[top(name)] " " name
	cur = name; next
}
/^panic: / && !panicked { panicked = $0 }
/^goleak: / { leak = $0 }
/^FAIL\t/ { split($0, f, "\t"); pkgs_failed[f[2]] = $0 }
# t.Log/t.Fatal lines, kept per top-level test; the last 3 distinct ones
# (usually the failure) are shown for a failed test.
/_test\.go:[0-9]+: / { t = top(cur); m = $0; sub(/^[ \t]+/, "", m); if (t != "" && m != lastmsg[t]) { mm[t, ++nmsg[t]] = substr(m, 1, 240); lastmsg[t] = m } }
END {
	for (i = 1; i <= ns; i++) {
		t = order[i]; r = (t in result) ? result[t] : "NORESULT"
		if (r == "PASS") { pass++; if (t in ok) upass[++nup] = t }
		else if (r == "SKIP") { skip++; skipped[++nsk] = t }
		else { fail++; failed[++nf] = t; if (r == "NORESULT") note[t] = " (no result: hung/timeout/panic)" }
	}
	if (leak != "") { t = "TestMain"; fail++; failed[++nf] = t; note[t] = " (" leak ")" }
	# A package that failed with no failing test to show for it.
	nf0 = nf
	for (p in pkgs_failed) if (nf0 == 0 || pkgs_failed[p] ~ /build failed|setup failed/) {
		t = "PACKAGE:" p; fail++; failed[++nf] = t; note[t] = " (" pkgs_failed[p] ")"
	}
	printf "\n==== amqp091-go compat summary: %d passed, %d failed, %d skipped (top-level tests)\n", pass, fail, skip
	if (panicked != "") printf "  test binary %s\n", panicked
	unexp = 0
	if (nf) {
		printf "\n  FAILED:\n"
		for (i = 1; i <= nf; i++) {
			t = failed[i]; tag = (t in ok) ? "expected" : "UNEXPECTED"
			if (!(t in ok)) unexp++
			printf "    [%s] %s%s\n", tag, t, note[t]
			if (failsub[t] != "") printf "      failed subtests:%s\n", failsub[t]
			for (j = (nmsg[t] > 3 ? nmsg[t] - 2 : 1); j <= nmsg[t]; j++) printf "      %s\n", mm[t, j]
		}
	}
	if (nsk) { printf "\n  SKIPPED:\n"; for (i = 1; i <= nsk; i++) printf "    %s\n", skipped[i] }
	if (nup) { printf "\n  allowlisted but PASSED now (remove from compat-expected-failures.txt):\n"; for (i = 1; i <= nup; i++) printf "    %s\n", upass[i] }
	print unexp > "/dev/stderr"
}' "$TEST_LOG" 2>"$TMP/unexpected"
UNEXPECTED=$(cat "$TMP/unexpected" 2>/dev/null || echo 1)

echo
say "go test exit status $GOTEST_RC; full log: $TEST_LOG; broker log: $BROKER_LOG"
if [ "$BROKER_ALIVE" = 0 ]; then
	say "WARNING: the broker exited during the run; last lines of its log:"
	tail -n 20 "$BROKER_LOG"
	UNEXPECTED=$((UNEXPECTED + 1))
fi
if ! grep -qE -- '--- (PASS|FAIL|SKIP): ' "$TEST_LOG"; then
	say "no test results in the log (build failure?); last lines:"
	tail -n 30 "$TEST_LOG"
	exit 1
fi
finish "$UNEXPECTED"
