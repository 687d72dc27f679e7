package codec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ServerTokenEnv may hold the codec server's bearer token instead of a token file.
const ServerTokenEnv = "PROVISIONER_CODEC_SERVER_TOKEN"

// ReadToken reads the codec server's bearer token from ServerTokenEnv, else from file.
func ReadToken(file string) (string, error) {
	if t := os.Getenv(ServerTokenEnv); t != "" {
		return t, nil
	}
	if file == "" {
		return "", fmt.Errorf("a bearer token is required: --token-file or %s", ServerTokenEnv)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return "", errors.New("the codec server token must be at least 16 characters")
	}
	return t, nil
}

// Serve listens on addr until ctx ends and returns the bound address.
func Serve(ctx context.Context, addr string, cd *Codec, token string, origins []string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: Handler(cd, token, origins), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), nil
}
