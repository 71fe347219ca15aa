package broker

import (
	"io"
	"net"
	"sync/atomic"
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
//
// Read is for the connection's reader only; Write and TryWrite for the
// holder of the connection's write lock.
type sockIO struct {
	nc     net.Conn
	rc     syscall.RawConn // nil: use nc
	rd, wr rawOp           // the read and the write in progress
	// Bound once: a closure per call would allocate.
	readFn, writeFn func(fd uintptr) bool
	// What went through: bytes and reads or writes that moved some
	// (RabbitMQ's recv_oct, recv_cnt, send_oct, send_cnt), read by the
	// management API from any goroutine.
	recvOct, recvCnt, sendOct, sendCnt atomic.Int64
}

// counted adds a read (in) or write of n bytes to s's counts, and
// returns n.
func (s *sockIO) counted(in bool, n int) int {
	if n <= 0 {
		return n
	}
	if in {
		s.recvOct.Add(int64(n))
		s.recvCnt.Add(1)
	} else {
		s.sendOct.Add(int64(n))
		s.sendCnt.Add(1)
	}
	return n
}

// rawOp is one read or write through the RawConn callback.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
	wait  bool // on EAGAIN, wait for the socket (else return)
}

func newSockIO(nc net.Conn) *sockIO {
	s := &sockIO{nc: nc}
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	s.readFn = s.rd.read
	s.writeFn = s.wr.write
	return s
}

// read is the RawConn callback of a read: false means wait for input.
func (o *rawOp) read(fd uintptr) bool {
	n, e := sysRead(fd, o.p)
	switch e {
	case 0:
		o.n = n
		return true
	case syscall.EAGAIN:
		return false
	}
	o.errno = e
	return true
}

// sysRead is one read(2) of fd into p (not empty), raw, again on EINTR.
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

// write is the RawConn callback of a write: false means wait for room.
func (o *rawOp) write(fd uintptr) bool {
	for o.n < len(o.p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.p[o.n])), uintptr(len(o.p)-o.n))
		switch e {
		case 0:
			o.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return !o.wait
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// Read reads at least one byte, or returns io.EOF at the end of the
// stream, or the poller's error (a deadline, a closed connection).
func (s *sockIO) Read(p []byte) (int, error) {
	if s.rc == nil || len(p) == 0 {
		n, err := s.nc.Read(p)
		return s.counted(true, n), err
	}
	s.rd = rawOp{p: p}
	err := s.rc.Read(s.readFn)
	n, errno := s.rd.n, s.rd.errno
	s.rd = rawOp{}
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, s.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return s.counted(true, n), nil
}

// Write writes all of p, waiting for room in the socket as needed.
func (s *sockIO) Write(p []byte) (int, error) {
	if s.rc == nil || len(p) == 0 {
		n, err := s.nc.Write(p)
		return s.counted(false, n), err
	}
	s.wr = rawOp{p: p, wait: true}
	err := s.rc.Write(s.writeFn)
	n, errno := s.wr.n, s.wr.errno
	s.wr = rawOp{}
	s.counted(false, n)
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, s.opError("write", errno)
	}
	return n, nil
}

// TryWrite writes what the socket takes of p without waiting, and returns
// how much that was. Errors are left to the next Write.
func (s *sockIO) TryWrite(p []byte) int {
	if s.rc == nil || len(p) == 0 {
		return 0
	}
	s.wr = rawOp{p: p}
	_ = s.rc.Write(s.writeFn)
	n := s.wr.n
	s.wr = rawOp{}
	return s.counted(false, n)
}

func (s *sockIO) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: errno}
}
