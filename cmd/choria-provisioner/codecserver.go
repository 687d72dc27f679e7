package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/service"
)

// CodecServerTokenEnv may hold the codec server's bearer token instead of --token-file.
const CodecServerTokenEnv = "PROVISIONER_CODEC_SERVER_TOKEN"

// codecServerCommand serves Temporal's remote codec API so the Web UI and the temporal CLI can
// show decrypted payloads to callers holding the bearer token.
type codecServerCommand struct {
	config    string
	listen    string
	tokenFile string
	origins   []string
}

func (c *codecServerCommand) register(app *fisk.Application) {
	cmd := app.Command("codec-server", "Serves the remote codec API (decrypts payloads for authorised Web UI and CLI users)")
	cmd.Flag("config", "Provisioner configuration (for the codec keys)").Default("/etc/choria-provisioner/choria-provisioner.yaml").StringVar(&c.config)
	cmd.Flag("listen", "Listen address").Default("127.0.0.1:8081").StringVar(&c.listen)
	cmd.Flag("token-file", "File holding the bearer token callers must present (or "+CodecServerTokenEnv+")").StringVar(&c.tokenFile)
	cmd.Flag("cors-origin", "Web UI origin allowed to call it, e.g. http://127.0.0.1:8233 (repeatable)").StringsVar(&c.origins)
}

func readToken(file string) (string, error) {
	if t := os.Getenv(CodecServerTokenEnv); t != "" {
		return t, nil
	}
	if file == "" {
		return "", fmt.Errorf("a bearer token is required: --token-file or %s", CodecServerTokenEnv)
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

func (c *codecServerCommand) run(ctx context.Context) error {
	cfg, err := config.LoadForOperator(c.config)
	if err != nil {
		return err
	}
	token, err := readToken(c.tokenFile)
	if err != nil {
		return err
	}
	_, cd, err := service.DataConverter(cfg)
	if err != nil {
		return err
	}
	if cd == nil {
		return errors.New("temporal.plaintext is set: there is nothing to decode")
	}
	addr, err := serveCodec(ctx, c.listen, cd, token, c.origins)
	if err != nil {
		return err
	}
	fmt.Printf("codec server on http://%s (key %s)\n", addr, cd.ActiveKeyID())
	<-ctx.Done()
	return nil
}

// serveCodec listens on addr until ctx ends and returns the bound address.
func serveCodec(ctx context.Context, addr string, cd *codec.Codec, token string, origins []string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: codec.Handler(cd, token, origins), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), nil
}
