# lib.sh: what the compat scripts share. Source it after defining say().
#
#   BROKER_PID   the broker a script started (stop_broker stops it)

BROKER_PID=

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
