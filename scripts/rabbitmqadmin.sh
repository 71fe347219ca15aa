#!/usr/bin/env bash
# Prints the path of Debian's rabbitmqadmin (RabbitMQ's CLI for its HTTP
# API, a Python 3 script that ships with rabbitmq-server). When it is not
# installed, it is taken out of the rabbitmq-server package without
# installing it (apt-get download, dpkg-deb -x: no service starts, no
# dependency is pulled) into a cache:
#   RABBITMQADMIN_CACHE=/tmp/railmq-rabbitmqadmin
# The tests that drive it (conformance: TestRabbitmqadmin*) read its path
# from RAILMQ_RABBITMQADMIN; .ci/run sets it from this script.
set -euo pipefail
if p=$(command -v rabbitmqadmin 2>/dev/null); then
	echo "$p"
	exit 0
fi
CACHE=${RABBITMQADMIN_CACHE:-/tmp/railmq-rabbitmqadmin}
if [ -x "$CACHE/usr/bin/rabbitmqadmin" ]; then
	echo "$CACHE/usr/bin/rabbitmqadmin"
	exit 0
fi
command -v apt-get >/dev/null 2>&1 || { echo "rabbitmqadmin: not installed and no apt-get" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
if ! apt-get download -q rabbitmq-server >apt.log 2>&1; then
	apt-get update -q >>apt.log 2>&1 || true
	apt-get download -q rabbitmq-server >>apt.log 2>&1 || { tail -n 20 apt.log >&2; exit 1; }
fi
dpkg-deb -x rabbitmq-server_*.deb "$TMP/x"
mkdir -p "$CACHE/usr/bin"
cp "$TMP/x/usr/bin/rabbitmqadmin" "$CACHE/usr/bin/"
echo "$CACHE/usr/bin/rabbitmqadmin"
