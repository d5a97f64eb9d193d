package http

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// watchDisconnect reports, through the returned channel, when the client of a long-poll closes
// its connection, so the queue actor can drop the parked pop instead of leasing messages for
// nobody. It waits for the socket to become readable and peeks (MSG_PEEK) without consuming:
// zero bytes means the peer closed; data (a pipelined request) means it is alive and is left
// for fasthttp to read. stop must be called before the handler returns: it interrupts the wait
// with a read deadline and restores the connection for fasthttp.
func watchDisconnect(ctx *fasthttp.RequestCtx) (gone <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	conn := ctx.Conn()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return ch, func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return ch, func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var closed bool
		buf := make([]byte, 1)
		err := raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) {
				return false // not readable yet: park on the poller
			}
			closed = n == 0 || err != nil
			return true
		})
		if closed || (err != nil && !isTimeout(err)) {
			close(ch)
		}
	}()
	return ch, func() {
		_ = conn.SetReadDeadline(time.Now())
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
