// Package testnet serves loopback connections for unit tests (faultproxy, service).
// Tests only: nothing in a binary imports it.
package testnet

import (
	"net"
	"testing"
)

// Serve accepts on l until the test ends, when l is closed: each connection is handled in a
// goroutine of its own and closed when handle returns.
func Serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Helper()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
