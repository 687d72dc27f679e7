// Package httpserve serves the provisioner's own small HTTP endpoints (/metrics, /healthz and
// /readyz) on listeners of their own, for as long as the process runs.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// shutdownGrace is how long a request in flight may finish once the context ends.
const shutdownGrace = 2 * time.Second

// Serve binds addr, serves h there until ctx ends and returns the bound address (useful with
// port 0) once listening. what names the listener in the bind error.
func Serve(ctx context.Context, what, addr string, h http.Handler) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s listener on %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener is gone: the scrapes and probes that use it say so
		}
	}()
	return l.Addr().String(), nil
}
