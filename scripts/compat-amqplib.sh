#!/usr/bin/env bash
# compat-amqplib.sh: run the Node.js client library amqplib's own test files
# (test/*.test.js, node's built-in test runner) against a freshly built
# railmq, and summarise the result.
#
#   scripts/compat-amqplib.sh     (or: make compat-amqplib; make compat runs it too)
#
# amqplib@$AMQPLIB_VERSION is fetched from the npm registry with `npm pack`
# and its devDependencies installed with `npm install` (cached under
# $TMPDIR/railmq-amqplib-cache); nothing of it is copied into this repository.
# When `node` is missing, Node and npm are installed from Debian's apt (as
# root).
#
# Most tests dial the default amqp://localhost (port 5672), one dials
# amqp://[::1], and channel_api.test.js dials $URL: railmq listens on
# 127.0.0.1:5672 and [::1]:5672, so port 5672 must be free.
#
# Each file runs in its own `node --test --test-reporter=tap` with a per-file
# timeout. A listing pass first (every test skipped by a name pattern that
# matches nothing) records which tests each file has, so a test that never
# reports (it hung, or its file timed out) counts as failed. The allowlisted
# tests run apart from the rest of their file (see "isolated" below).
#
# Exit status: 0 when every failing test is listed in
# scripts/compat-amqplib-expected-failures.txt, 1 when some other test failed
# (or hung, or a file timed out or failed outside any test), 2 on a setup
# error.
#
# Environment:
#   GO                           go command (default: go)
#   AMQPLIB_VERSION              client version (default: 2.2.0)
#   COMPAT_AMQPLIB_LISTEN        railmq --listen (default: 127.0.0.1:5672,[::1]:5672,
#                                or 127.0.0.1:5672 when the loopback has no ::1)
#   COMPAT_AMQPLIB_FILE_TIMEOUT  seconds per test file (default: 30)
#   COMPAT_AMQPLIB_FILES         test files to run, e.g. "connect.test.js" (default: test/*.test.js)
#   COMPAT_AMQPLIB_PATTERN       node --test-name-pattern (default: run everything)
#   COMPAT_AMQPLIB_BROKER_ARGS   extra railmq flags, e.g. "--log-level debug"
#   COMPAT_AMQPLIB_URL           run against this already running broker on this
#                                machine instead of railmq, e.g. RabbitMQ at
#                                amqp://guest:guest@127.0.0.1:5673/; the tests'
#                                connections to port 5672 are redirected to its port
#   COMPAT_AMQPLIB_CACHE         cache directory (default: $TMPDIR/railmq-amqplib-cache)
#   COMPAT_LOG_DIR               where the logs go (default: $TMPDIR or /tmp)
#   COMPAT_KEEP_TMP=1            keep the temp dir (package copy, broker data)
set -uo pipefail

GO=${GO:-go}
AMQPLIB_VERSION=${AMQPLIB_VERSION:-2.2.0}
FILE_TIMEOUT=${COMPAT_AMQPLIB_FILE_TIMEOUT:-30}
LOG_DIR=${COMPAT_LOG_DIR:-${TMPDIR:-/tmp}}
CACHE_ROOT=${COMPAT_AMQPLIB_CACHE:-${TMPDIR:-/tmp}/railmq-amqplib-cache}
EXTERNAL_URL=${COMPAT_AMQPLIB_URL:-}
PORT=5672

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ALLOWLIST=$ROOT/scripts/compat-amqplib-expected-failures.txt
TEST_LOG=$LOG_DIR/railmq-compat-amqplib-test.log
LIST_LOG=$LOG_DIR/railmq-compat-amqplib-list.log
BROKER_LOG=$LOG_DIR/railmq-compat-amqplib-broker.log

# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh" compat-amqplib railmq-compat-amqplib
case $FILE_TIMEOUT in '' | *[!0-9]*) die "COMPAT_AMQPLIB_FILE_TIMEOUT must be a number of seconds" ;; esac

# has_ipv6_loopback: the loopback interface has ::1.
has_ipv6_loopback() { grep -qs '^0\{31\}1 .* lo$' /proc/net/if_inet6; }

# --- node and npm ------------------------------------------------------------
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || die "node/npm not found and there is no apt-get: install Node.js (18+) and npm"
	[ "$(id -u)" = 0 ] || die "node/npm not found: run as root (to apt-get install -y nodejs npm) or install them yourself"
	say "node/npm not found: apt-get install -y nodejs npm"
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update -q && apt-get install -y -q nodejs npm; } >"$TMP/apt.log" 2>&1 ||
		{ tail -n 20 "$TMP/apt.log" >&2; die "apt-get install nodejs npm failed"; }
	hash -r
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || die "node/npm still not found after apt-get install"
fi
NODE_VERSION=$(node --version 2>/dev/null) || die "node --version failed"
NODE_MAJOR=${NODE_VERSION#v}
NODE_MAJOR=${NODE_MAJOR%%.*}
[ "$NODE_MAJOR" -ge 18 ] 2>/dev/null || die "node $NODE_VERSION is too old (amqplib's tests need 18+)"
# --test-timeout (node 20.11+) makes node end a hanging file itself and
# report it; `timeout` (run_file) is the backstop, and all that older nodes get.
HAVE_TEST_TIMEOUT=0
node --help 2>/dev/null | grep -q -- '--test-timeout' && HAVE_TEST_TIMEOUT=1

# --- the client package ------------------------------------------------------
# The cache holds the unpacked package with its node_modules; a run copies the
# package (not node_modules, which it links) into its temp dir.
CACHE=$CACHE_ROOT/amqplib-$AMQPLIB_VERSION
if [ ! -f "$CACHE/.complete" ]; then
	mkdir -p "$CACHE_ROOT" || die "cannot create $CACHE_ROOT"
	PARTIAL=$(mktemp -d "$CACHE_ROOT/.amqplib-$AMQPLIB_VERSION.XXXXXX") || die "mktemp in $CACHE_ROOT failed"
	say "fetching amqplib@$AMQPLIB_VERSION (npm pack) into $CACHE"
	TARBALL=$(cd "$PARTIAL" && npm pack "amqplib@$AMQPLIB_VERSION" --silent 2>"$PARTIAL/npm-pack.log" | tail -n 1)
	[ -n "$TARBALL" ] && [ -f "$PARTIAL/$TARBALL" ] || { cat "$PARTIAL/npm-pack.log" >&2; rm -rf "$PARTIAL"; die "npm pack amqplib@$AMQPLIB_VERSION failed"; }
	tar -xzf "$PARTIAL/$TARBALL" -C "$PARTIAL" || { rm -rf "$PARTIAL"; die "cannot unpack $TARBALL"; }
	# --ignore-scripts: the devDependencies' install scripts are not needed by
	# the tests (lefthook's would install git hooks into whatever repository
	# encloses the cache).
	say "npm install (amqplib's devDependencies)"
	if ! (cd "$PARTIAL/package" && npm install --ignore-scripts --no-audit --no-fund --no-package-lock --loglevel=error) >"$PARTIAL/npm-install.log" 2>&1; then
		tail -n 20 "$PARTIAL/npm-install.log" >&2
		rm -rf "$PARTIAL"
		die "npm install in amqplib@$AMQPLIB_VERSION failed"
	fi
	touch "$PARTIAL/.complete"
	rm -rf "$CACHE"
	mv "$PARTIAL" "$CACHE" || { rm -rf "$PARTIAL"; die "cannot move the package into $CACHE"; }
fi
PKG=$TMP/amqplib
mkdir -p "$PKG" || die "cannot create $PKG"
for entry in "$CACHE/package"/* "$CACHE/package"/.[!.]*; do
	[ -e "$entry" ] || continue
	case ${entry##*/} in node_modules) continue ;; esac
	cp -R "$entry" "$PKG/" || die "copy of $entry failed"
done
ln -s "$CACHE/package/node_modules" "$PKG/node_modules" || die "cannot link node_modules"
grep -q "\"version\": \"$AMQPLIB_VERSION\"" "$PKG/package.json" || die "$CACHE does not hold amqplib $AMQPLIB_VERSION (remove it)"
say "client: amqplib@$AMQPLIB_VERSION (cache: $CACHE), node $NODE_VERSION"

FILES=()
if [ -n "${COMPAT_AMQPLIB_FILES:-}" ]; then
	for f in $COMPAT_AMQPLIB_FILES; do
		f=${f##*/}
		[ -f "$PKG/test/$f" ] || die "no test file test/$f in amqplib@$AMQPLIB_VERSION"
		FILES+=("$f")
	done
else
	for f in "$PKG"/test/*.test.js; do FILES+=("${f##*/}"); done
fi
[ "${#FILES[@]}" -gt 0 ] || die "no test files found in $PKG/test"

# --- the broker -------------------------------------------------------------
if [ -n "$EXTERNAL_URL" ]; then
	# Against another broker (to compare): the tests that dial the default
	# port are sent to that broker's port by a preloaded net.connect wrapper.
	HOSTPORT=${EXTERNAL_URL#*://}
	HOSTPORT=${HOSTPORT%%/*}
	HOSTPORT=${HOSTPORT##*@}
	XPORT=5672
	case $HOSTPORT in *\]:*) XPORT=${HOSTPORT##*\]:} ;; \[*) ;; *:*) XPORT=${HOSTPORT##*:} ;; esac
	case $XPORT in '' | *[!0-9]*) die "cannot read a port from COMPAT_AMQPLIB_URL=$EXTERNAL_URL" ;; esac
	cat >"$TMP/redirect-5672.js" <<'EOF'
// Preloaded by compat-amqplib.sh (COMPAT_AMQPLIB_URL): connections to port
// 5672 go to $COMPAT_AMQPLIB_REDIRECT_PORT instead.
'use strict';
const net = require('node:net');
const to = Number(process.env.COMPAT_AMQPLIB_REDIRECT_PORT);
if (to) {
  const connect = net.connect;
  net.connect = net.createConnection = function (opts, ...rest) {
    if (opts !== null && typeof opts === 'object' && Number(opts.port) === 5672) opts = { ...opts, port: to };
    return connect.call(this, opts, ...rest);
  };
}
EOF
	export COMPAT_AMQPLIB_REDIRECT_PORT=$XPORT
	export NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--require $TMP/redirect-5672.js"
	export URL=$EXTERNAL_URL
	BROKER_DESC="external broker $EXTERNAL_URL (connections to :5672 redirected to :$XPORT)"
	: >"$BROKER_LOG"
else
	cd "$ROOT" || die "cannot cd to $ROOT"
	say "building railmq"
	"$GO" build -o "$TMP/railmq" ./cmd/railmq || die "go build ./cmd/railmq failed"

	for host in 127.0.0.1 ::1; do
		if port_open "$host" "$PORT"; then
			who=$(ss -Hltnp "sport = :$PORT" 2>/dev/null | head -n 3)
			die "port $PORT is already in use on $host${who:+ ($who)}: amqplib's tests dial amqp://localhost:5672, so stop whatever listens there first"
		fi
	done
	LISTEN=${COMPAT_AMQPLIB_LISTEN:-}
	if [ -z "$LISTEN" ]; then
		LISTEN=127.0.0.1:$PORT
		if has_ipv6_loopback; then LISTEN="127.0.0.1:$PORT,[::1]:$PORT"; else say "no ::1 on the loopback: listening on $LISTEN only (the ipv6 test will fail)"; fi
	fi

	# start_broker: start railmq on $LISTEN and wait until every address in
	# it accepts connections; 0 when up, 1 when it exited, 2 when it hung.
	start_broker() {
		rm -rf "$TMP/data" && mkdir -p "$TMP/data" || die "cannot create $TMP/data"
		# shellcheck disable=SC2086 # COMPAT_AMQPLIB_BROKER_ARGS is a list of flags
		"$TMP/railmq" --listen "$LISTEN" --data-dir "$TMP/data" ${COMPAT_AMQPLIB_BROKER_ARGS:-} >"$BROKER_LOG" 2>&1 &
		BROKER_PID=$!
		local addrs a host up
		IFS=, read -r -a addrs <<<"$LISTEN"
		for _ in $(seq 1 150); do
			kill -0 "$BROKER_PID" 2>/dev/null || { wait "$BROKER_PID" 2>/dev/null; BROKER_PID=; return 1; }
			up=1
			for a in "${addrs[@]}"; do
				host=${a%:*}; host=${host#\[}; host=${host%\]}
				port_open "${host:-127.0.0.1}" "${a##*:}" || { up=0; break; }
			done
			[ "$up" = 1 ] && return 0
			sleep 0.2
		done
		return 2
	}
	start_broker
	case $? in
	0) ;;
	1)
		if grep -qE 'address already in use' "$BROKER_LOG"; then
			tail -n 5 "$BROKER_LOG" >&2
			die "railmq cannot listen on $LISTEN: address already in use"
		fi
		if [[ $LISTEN == *,* ]] && grep -qE 'listen tcp: address [^ ]*,|too many colons|missing port' "$BROKER_LOG"; then
			# railmq before 9ad2ff1 takes one --listen address only.
			say "WARNING: this railmq takes one --listen address, not \"$LISTEN\"; listening on 127.0.0.1:$PORT only (the ipv6 test will fail)"
			LISTEN=127.0.0.1:$PORT
			start_broker || { tail -n 20 "$BROKER_LOG" >&2; die "broker did not start on $LISTEN"; }
		else
			tail -n 20 "$BROKER_LOG" >&2
			die "broker exited during start-up (--listen $LISTEN)"
		fi
		;;
	*) die "broker did not accept connections on $LISTEN within 30s" ;;
	esac
	export URL="amqp://guest:guest@127.0.0.1:$PORT/"
	BROKER_DESC="railmq pid $BROKER_PID on $LISTEN (log: $BROKER_LOG)"
fi
say "broker: $BROKER_DESC"

# --- the tests ---------------------------------------------------------------
# run_file LOG MARK SECS FILE ARGS...: one test file under node --test with a
# timeout of SECS, its TAP output appended to LOG between "##### MARK" and
# "##### end" lines.
run_file() {
	local log=$1 mark=$2 secs=$3 f=$4 start rc args=()
	shift 4
	[ "$HAVE_TEST_TIMEOUT" = 1 ] && args=(--test-timeout="$((secs * 1000))")
	printf '##### %s %s %s\n' "$mark" "$f" "$PKG/test/$f" >>"$log"
	start=$SECONDS
	(cd "$PKG" && exec timeout -k 5 "$((secs + 10))" node --test --test-reporter=tap "${args[@]}" "$@" "test/$f") >>"$log" 2>&1
	rc=$?
	printf '##### end %s rc=%d secs=%d\n' "$f" "$rc" "$((SECONDS - start))" >>"$log"
	printf '  %-24s exit %3d  %3ds%s\n' "$f" "$rc" "$((SECONDS - start))" "${RUN_NOTE:-}"
	return "$rc"
}

# re_escape NAME: NAME as a literal in a JavaScript regular expression.
re_escape() { printf '%s' "$1" | sed 's/[][\\.*+?^${}()|/]/\\&/g'; }

# The allowlisted tests run on their own. In node 18 a test that fails with an
# uncaught exception (as the allowlisted one does) leaves its suite unfinished,
# and every later test of its file hangs or is cancelled; so each file's main
# run skips its allowlisted tests by a name pattern, and a second run of that
# file runs only them. The pattern must not match a suite above them, nor the
# test runner's own root test ("<root>"), or node runs the whole subtree.
declare -A EXCLUDE ONLY
if [ -z "${COMPAT_AMQPLIB_PATTERN:-}" ]; then
	while IFS= read -r entry; do
		[[ $entry == *" > "* ]] || continue
		f=${entry%% > *}
		r=${entry#* > }
		comps=()
		while [[ $r == *" > "* ]]; do comps+=("${r%% > *}"); r=${r#* > }; done
		for c in "${comps[@]}" "$r"; do EXCLUDE[$f]+="${EXCLUDE[$f]:+|}$(re_escape "$c")"; done
		ONLY[$f]+="${ONLY[$f]:+|}$(re_escape "$r")"
	done < <(awk '/^[ \t]*#/ { next } { sub(/(\t|  )[ \t]*#.*$/, ""); sub(/^[ \t]+/, ""); sub(/[ \t]+$/, "") } $0 != ""' "$ALLOWLIST" 2>/dev/null)
fi

# The listing pass: '$.^' matches no name, so every test reports as skipped
# without running.
: >"$LIST_LOG"
say "listing the tests (every test skipped by a name pattern): $LIST_LOG"
for f in "${FILES[@]}"; do run_file "$LIST_LOG" begin "$FILE_TIMEOUT" "$f" --test-name-pattern='$.^' >/dev/null; done

say "node --test --test-reporter=tap$([ "$HAVE_TEST_TIMEOUT" = 1 ] && echo " --test-timeout=$((FILE_TIMEOUT * 1000))") test/<file>, ${#FILES[@]} files, ${FILE_TIMEOUT}s each  (URL=$URL)"
say "TAP output: $TEST_LOG"
: >"$TEST_LOG"
RUN_START=$SECONDS
for f in "${FILES[@]}"; do
	if [ -n "${COMPAT_AMQPLIB_PATTERN:-}" ]; then
		run_file "$TEST_LOG" begin "$FILE_TIMEOUT" "$f" --test-name-pattern="$COMPAT_AMQPLIB_PATTERN"
	elif [ -n "${EXCLUDE[$f]:-}" ]; then
		RUN_NOTE="  (allowlisted tests skipped)" run_file "$TEST_LOG" begin "$FILE_TIMEOUT" "$f" --test-name-pattern="^(?!(?:${EXCLUDE[$f]}|<root>)\$)"
	else
		run_file "$TEST_LOG" begin "$FILE_TIMEOUT" "$f"
	fi
done
# The allowlisted tests alone; their file may then hang (node 18), so the
# timeout is short, and only these tests' results count.
for f in "${FILES[@]}"; do
	[ -n "${ONLY[$f]:-}" ] || continue
	RUN_NOTE="  (allowlisted tests only)" run_file "$TEST_LOG" begin-isolated "$((FILE_TIMEOUT < 10 ? FILE_TIMEOUT : 10))" "$f" --test-name-pattern="^(?:${ONLY[$f]})\$"
done
RUN_SECS=$((SECONDS - RUN_START))

BROKER_ALIVE=1
[ -z "$EXTERNAL_URL" ] && ! kill -0 "$BROKER_PID" 2>/dev/null && BROKER_ALIVE=0

# --- summary -----------------------------------------------------------------
# The TAP parser. A test's name is "<file> > <describe> > ... > <test>"; a
# file without any test (data.test.js) is a test named by the file alone,
# and so is a file-level failure (e.g. node's per-file timeout). mode=list
# prints the tests (leaves: not suites) in order; mode=summary prints the
# summary (and the number of unexpected failures on stderr). In a
# "begin-isolated" run only the tests that ran count: they replace the main
# run's skips.
cat >"$TMP/tap.awk" <<'EOF'
function indent(s) { match(s, /^ */); return int(RLENGTH / 4) }
function finish(   p, k, anc, st) {
	if (!pending) return
	pending = 0
	p = pend_path
	if (pend_kids > 0 || pend_suite) {
		if (pend_status == "FAIL" && !iso) { suitefail[++nsf] = p; why[p] = pend_why }
		return
	}
	st = pend_status
	if (st == "FAIL" && pend_dir ~ /^TODO/) st = "SKIP"
	if (st == "PASS" && pend_dir ~ /^(SKIP|TODO)/) st = "SKIP"
	if (iso) {
		if (pend_dir ~ /DOES NOT MATCH PATTERN/) return
		if (++isodup[p] > 1) p = p " [" isodup[p] "]"
		isoran[p] = 1
	} else {
		if (++dup[p] > 1) p = p " [" dup[p] "]"
		if (pend_dir ~ /DOES NOT MATCH PATTERN/) patskip[p] = 1
	}
	if (!(p in result)) order[++nres] = p
	result[p] = st
	if (st == "FAIL") {
		why[p] = pend_why
		if (iso) return
		filefail[file] = 1
		anc = file
		for (k = 0; k < pend_depth; k++) if (names[k] != abs) { anc = anc " > " names[k]; failbelow[anc] = 1 }
	}
}
BEGIN {
	if (mode == "summary") {
		while ((getline line < expected) > 0) if (line != "") { if (!(line in isexp)) exp_order[++nexp] = line; isexp[line] = 1 }
		while ((getline line < allow) > 0) {
			if (line ~ /^[ \t]*#/) continue
			sub(/(\t|  )[ \t]*#.*$/, "", line); sub(/^[ \t]+/, "", line); sub(/[ \t]+$/, "", line)
			if (line != "") ok[line] = 1
		}
	}
}
/^##### begin(-isolated)? / {
	finish(); iso = ($2 == "begin-isolated")
	file = $3; abs = $0; sub(/^##### [^ ]+ [^ ]+ /, "", abs)
	if (!iso) files[++nfiles] = file
	for (k in names) delete names[k]
	for (k in kids) delete kids[k]
	inyaml = 0; next
}
/^##### end / {
	finish(); inyaml = 0
	rc = $4; sub(/^rc=/, "", rc); secs = $5; sub(/^secs=/, "", secs)
	if (!iso) { filerc[file] = rc; filesecs[file] = secs }
	next
}
inyaml {
	if ($0 ~ /^ *\.\.\.$/) { inyaml = 0; finish(); next }
	if ($0 ~ /^ *type: .suite.$/) pend_suite = 1
	else if ($0 ~ /^ *failureType: /) { s = $0; sub(/^ *failureType: /, "", s); gsub(/'/, "", s); pend_ft = s }
	else if (pend_errnext) { s = $0; sub(/^ */, "", s); pend_why = pend_why s; pend_errnext = 0 }
	else if ($0 ~ /^ *error: / && !pend_haserr) {
		pend_haserr = 1; s = $0; sub(/^ *error: /, "", s)
		if (s ~ /^[|>]/) pend_errnext = 1
		else { if (s ~ /^'.*'$/) s = substr(s, 2, length(s) - 2); pend_why = pend_why s }
	}
	if (pend_ft != "" && pend_why !~ /^\[/) { pend_why = "[" pend_ft "] " pend_why; pend_ft = "" }
	next
}
/^ *# Subtest: / {
	finish()
	d = indent($0); s = $0; sub(/^ *# Subtest: /, "", s)
	names[d] = s; kids[d] = 0
	next
}
/^ *(not )?ok [0-9]+( - .*)?$/ {
	finish()
	d = indent($0); s = $0; sub(/^ */, "", s)
	pend_status = (s ~ /^not /) ? "FAIL" : "PASS"
	sub(/^(not )?ok [0-9]+( - )?/, "", s)
	pend_dir = ""
	i = index(s, " # ")
	if (i > 0) { pend_dir = toupper(substr(s, i + 3)); s = substr(s, 1, i - 1) }
	gsub(/\\#/, "#", s)
	if (s == abs) p = file
	else { p = file; for (k = 0; k < d; k++) if ((k in names) && names[k] != abs) p = p " > " names[k]; p = p " > " s }
	pend_path = p; pend_depth = d; pend_kids = kids[d] + 0; pend_suite = 0; pend_why = ""; pend_ft = ""; pend_errnext = 0; pend_haserr = 0
	if (d > 0) kids[d - 1]++
	pending = 1
	next
}
/^ *---$/ { if (pending) inyaml = 1; next }
{ finish() }
END {
	finish()
	if (mode == "list") { for (i = 1; i <= nres; i++) print order[i]; exit }
	# Expected tests first (in the listing's order), then any test the
	# listing did not have.
	for (i = 1; i <= nexp; i++) all[++nall] = exp_order[i]
	for (i = 1; i <= nres; i++) if (!(order[i] in isexp)) all[++nall] = order[i]
	for (i = 1; i <= nall; i++) {
		t = all[i]
		if (!(t in result)) { result[t] = "NORESULT"; why[t] = "no result: it hung, or its file timed out or crashed" }
		else if (result[t] == "SKIP" && (t in patskip) && !(t in isoran) && !userpattern) {
			result[t] = "NORESULT"
			why[t] = (t in ok) ? "no result when run on its own (hung?)" : "skipped by the pattern that sets the allowlisted tests apart (same name as one of their suites?), and not run on its own"
		}
		if (result[t] == "NORESULT") { f = t; sub(/ > .*/, "", f); filefail[f] = 1 }
		r = result[t]
		if (r == "PASS") { pass++; if (t in ok) upass[++nup] = t }
		else if (r == "SKIP") { skip++; skipped[++nsk] = t }
		else { fail++; failed[++nf] = t }
	}
	# A failed suite with no failed test under it (a hook failed).
	for (i = 1; i <= nsf; i++) if (!(suitefail[i] in failbelow)) { t = suitefail[i]; fail++; failed[++nf] = t; note[t] = " (suite)" }
	# A file that exited non-zero (timeout: 124, killed: 137) with no failure to show for it.
	for (i = 1; i <= nfiles; i++) {
		f = files[i]; rc = filerc[f]
		if (rc == "") { t = f; why[t] = "no end marker (the run was interrupted)" }
		else if (rc == 124 || rc == 137) { t = f; why[t] = "killed by the per-file timeout after " filesecs[f] "s" }
		else if (rc != 0 && !(f in filefail)) { t = f; why[t] = "node exited " rc " with no failing test" }
		else continue
		if (!(t in result) || result[t] != "FAIL") { fail++; failed[++nf] = t; note[t] = " (file)" }
	}
	printf "\n==== amqplib compat summary: %d passed, %d failed, %d skipped\n", pass, fail, skip
	unexp = 0
	if (nf) {
		printf "\n  FAILED:\n"
		for (i = 1; i <= nf; i++) {
			t = failed[i]; tag = (t in ok) ? "expected" : "UNEXPECTED"
			if (!(t in ok)) unexp++
			printf "    [%s] %s%s\n", tag, t, note[t]
			if (why[t] != "") printf "      %s\n", substr(why[t], 1, 300)
		}
	}
	if (nsk) { printf "\n  SKIPPED:\n"; for (i = 1; i <= nsk; i++) printf "    %s\n", skipped[i] }
	if (nup) { printf "\n  allowlisted but PASSED now (remove from compat-amqplib-expected-failures.txt):\n"; for (i = 1; i <= nup; i++) printf "    %s\n", upass[i] }
	print unexp > "/dev/stderr"
}
EOF
awk -v mode=list -f "$TMP/tap.awk" "$LIST_LOG" >"$TMP/expected-tests"
[ -s "$TMP/expected-tests" ] || say "WARNING: the listing pass found no tests (see $LIST_LOG); tests that never report cannot be counted"
USERPATTERN=0
[ -n "${COMPAT_AMQPLIB_PATTERN:-}" ] && USERPATTERN=1
awk -v mode=summary -v expected="$TMP/expected-tests" -v allow="$ALLOWLIST" -v userpattern="$USERPATTERN" -f "$TMP/tap.awk" "$TEST_LOG" 2>"$TMP/unexpected"
UNEXPECTED=$(cat "$TMP/unexpected" 2>/dev/null)
case $UNEXPECTED in '' | *[!0-9]*) UNEXPECTED=1 ;; esac

echo
if [ -n "$EXTERNAL_URL" ]; then
	say "tests took ${RUN_SECS}s; TAP output: $TEST_LOG; listing: $LIST_LOG; broker: $EXTERNAL_URL"
else
	say "tests took ${RUN_SECS}s; TAP output: $TEST_LOG; listing: $LIST_LOG; broker log: $BROKER_LOG"
fi
if [ "$BROKER_ALIVE" = 0 ]; then
	say "WARNING: the broker exited during the run; last lines of its log:"
	tail -n 20 "$BROKER_LOG"
	UNEXPECTED=$((UNEXPECTED + 1))
fi
if ! grep -qE '^ *(not )?ok [0-9]+' "$TEST_LOG"; then
	say "no test results in the TAP output; last lines:"
	tail -n 30 "$TEST_LOG"
	exit 1
fi
finish "$UNEXPECTED"
