package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// RefusedAddr returns a loopback address nothing listens on: a port that
// was free a moment ago, so that a dial to it is refused at once, as by a
// host whose Redis is down.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: no free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// HungAddr returns the address of a loopback listener that accepts every
// connection and reads all that is written to it, and never answers: a
// server that hangs before a client's handshake (HELLO) is answered. It
// stops, closing its connections, when the test ends.
func HungAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: no free port: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) }) // until the cleanup closes c
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}
