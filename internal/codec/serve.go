package codec

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/choria-temporal/provisioner/config"
)

// ServerTokenEnv may hold the codec server's bearer token instead of a token file.
const ServerTokenEnv = "PROVISIONER_CODEC_SERVER_TOKEN"

// ErrNotLoopback is returned when DevTrustOrigins is asked of a listener other hosts could reach.
var ErrNotLoopback = errors.New("serving the Web UI origins without a token is for a loopback listener only")

// MinTokenLength is the shortest bearer token the codec server accepts: the token is all that
// stands between a caller and every payload, so it must be one nobody guesses (openssl rand
// -hex 32 makes 64 characters).
const MinTokenLength = 32

// ReadToken reads the codec server's bearer token from ServerTokenEnv, else from file, which
// only the server's user (or a group it is in) may read (config.CheckKeyFile).
func ReadToken(file string) (string, error) {
	t, from := strings.TrimSpace(os.Getenv(ServerTokenEnv)), ServerTokenEnv
	if t == "" {
		if file == "" {
			return "", fmt.Errorf("a bearer token is required: --token-file or %s", ServerTokenEnv)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		if err := config.CheckKeyFile(file); err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		t, from = strings.TrimSpace(string(b)), file
	}
	if len(t) < MinTokenLength {
		return "", fmt.Errorf("the codec server token (%s) has %d characters, at least %d are required: make one with openssl rand -hex 32", from, len(t), MinTokenLength)
	}
	return t, nil
}

// Serve listens on addr until ctx ends and returns the bound address. With DevTrustOrigins the
// address must be a loopback one (127.0.0.0/8, ::1 or localhost), checked before and after binding.
func Serve(ctx context.Context, addr string, cd *Codec, o ServerOptions) (string, error) {
	if o.DevTrustOrigins {
		// refused before anything is bound: a refused server must not hold its port meanwhile
		if err := checkOrigins(o); err != nil {
			return "", err
		}
		if err := checkLoopback(addr); err != nil {
			return "", err
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	return ServeListener(ctx, l, cd, o)
}

// ServeListener serves on l, which it closes when ctx ends, and returns its address: for a
// caller that must hand the address to another process (a Web UI started with the codec
// endpoint) before it can build the server, and so binds first rather than pick a port that
// anything may take in between. With DevTrustOrigins, l must be bound to a loopback address.
func ServeListener(ctx context.Context, l net.Listener, cd *Codec, o ServerOptions) (string, error) {
	if o.DevTrustOrigins {
		if err := checkOrigins(o); err != nil {
			l.Close()
			return "", err
		}
		if ta, ok := l.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			l.Close()
			return "", fmt.Errorf("%w: bound %s", ErrNotLoopback, l.Addr())
		}
	}
	if o.TLS != nil {
		l = tls.NewListener(l, o.TLS)
	}
	srv := &http.Server{Handler: Handler(cd, o), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), nil
}

func checkOrigins(o ServerOptions) error {
	if len(o.Origins) == 0 {
		return errors.New("serving Web UI origins without a token needs the origins (--cors-origin)")
	}
	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w, not %q (an empty host or 0.0.0.0 listens on every interface)", ErrNotLoopback, addr)
}
