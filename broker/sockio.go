package broker

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// sockIO reads and writes a connection's socket. For a TCP socket it makes
// the read and write system calls itself, raw: Go's sockets are
// non-blocking, so these calls never block, and a raw call skips the
// runtime's syscall bookkeeping, which wakes the runtime's monitor thread
// whenever the process was idle (a quarter of the broker's CPU at a few
// thousand messages a second). Waiting for the socket and deadlines still
// go through Go's poller (syscall.RawConn). Any other net.Conn is used as
// it is.
type sockIO struct {
	nc net.Conn
	rc syscall.RawConn // nil: use nc
}

func newSockIO(nc net.Conn) sockIO {
	s := sockIO{nc: nc}
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	return s
}

// Read reads at least one byte, or returns io.EOF at the end of the
// stream, or the poller's error (a deadline, a closed connection).
func (s sockIO) Read(p []byte) (int, error) {
	if s.rc == nil || len(p) == 0 {
		return s.nc.Read(p)
	}
	var n int
	var errno syscall.Errno
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case 0:
				n = int(r)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until readable
			}
			errno = e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting for room in the socket as needed.
func (s sockIO) Write(p []byte) (int, error) {
	if s.rc == nil || len(p) == 0 {
		return s.nc.Write(p)
	}
	var n int
	var errno syscall.Errno
	err := s.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
				continue
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until writable
			}
			errno = e
			return true
		}
		return true
	})
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: errno}
	}
	return n, nil
}

// TryWrite writes what the socket takes of p without waiting, and returns
// how much that was. Errors are left to the next Write.
func (s sockIO) TryWrite(p []byte) int {
	if s.rc == nil || len(p) == 0 {
		return 0
	}
	n := 0
	_ = s.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			default:
				return true
			}
		}
		return true
	})
	return n
}
