#!/usr/bin/env bash
# A stream's recovery after kill -9: fill one stream log (stream/, segment
# files of 500 MB) to SIZE bytes with 1 KiB records, appended in batches
# of 256 with fsync (8 in flight), go on appending, kill the writer with
# SIGKILL mid-append, optionally (TORN=1, the default) cut the last
# segment inside its last chunk as a torn write would, then time, in a
# new process, Open (recovery: the last segment's tail is checked by CRC
# and truncated to the last whole chunk) and the first read at the last
# chunk, then at the first offset and the middle. Prints one JSON line.
# DROP_CACHES=1 drops the page cache before the open (root only).
# The log is deleted afterwards.
#
#   bash bench/stream-recovery.sh                 # SIZE=10 GiB
#   SIZE=$((2<<30)) bash bench/stream-recovery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
SIZE=${SIZE:-$((10 << 30))}
TORN=${TORN:-1}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/railmq-streamrec.XXXXXX")
pid=
cleanup() {
	if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
say() { echo "stream-recovery: $*" >&2; }
$GO test -c -o "$work/stream.test" ./stream/
export STREAM_RECOVERY_DIR=$work/log STREAM_RECOVERY_SIZE=$SIZE
say "filling $SIZE bytes in $work/log"
"$work/stream.test" -test.run '^TestRecoveryWrite$' -test.timeout 0 >&2 &
pid=$!
while [ ! -e "$work/ready" ]; do
	kill -0 "$pid" 2>/dev/null || { say "writer died"; exit 1; }
	sleep 1
done
sleep 0.5 # appending goes on
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
pid=
last=$(ls "$work/log"/*.seg | tail -1)
if [ "$TORN" = 1 ]; then
	sz=$(stat -c %s "$last")
	truncate -s $((sz - 100)) "$last"
	say "cut 100 bytes off $(basename "$last") (a torn last chunk)"
fi
if [ "${DROP_CACHES:-0}" = 1 ]; then
	sync
	echo 3 > /proc/sys/vm/drop_caches
	say "page cache dropped"
fi
say "$(du -sh "$work/log" | cut -f1) on disk; opening"
"$work/stream.test" -test.run '^TestRecoveryOpen$' -test.v 2>&1 | grep -E '^\{|WARN|FAIL|bytes_dropped' || true
