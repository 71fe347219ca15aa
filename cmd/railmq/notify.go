package main

import (
	"net"
	"os"
	"strings"

	"go.uber.org/zap"
)

// sdNotify sends state, newline-separated VAR=value assignments such as
// "READY=1", to the service manager at $NOTIFY_SOCKET, as systemd's
// sd_notify(3) does: one datagram on a unix datagram socket, whose name
// starts with '/' (a path) or '@' (an abstract name, '@' standing for
// the leading NUL byte). Without NOTIFY_SOCKET it does nothing (not run
// by systemd, or not Type=notify). A failure is logged at warn and
// otherwise ignored: the broker serves either way, and systemd times the
// start out if READY=1 never arrives.
func sdNotify(state string, log *zap.Logger) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if err := notifySocket(addr, state); err != nil {
		log.Warn("cannot notify the service manager", zap.String("notify_socket", addr), zap.String("state", state), zap.Error(err))
	}
}

// notifySocket writes state to the unix datagram socket named addr.
func notifySocket(addr, state string) error {
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
