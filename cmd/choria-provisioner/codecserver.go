package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/service"
)

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
	cmd.Flag("token-file", "File holding the bearer token callers must present (or "+codec.ServerTokenEnv+")").StringVar(&c.tokenFile)
	cmd.Flag("cors-origin", "Web UI origin allowed to call it, e.g. http://127.0.0.1:8233 (repeatable)").StringsVar(&c.origins)
}

func (c *codecServerCommand) run(ctx context.Context) error {
	cfg, err := config.LoadForOperator(c.config)
	if err != nil {
		return err
	}
	token, err := codec.ReadToken(c.tokenFile)
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
	addr, err := codec.Serve(ctx, c.listen, cd, token, c.origins)
	if err != nil {
		return err
	}
	fmt.Printf("codec server on http://%s (key %s)\n", addr, cd.ActiveKeyID())
	<-ctx.Done()
	return nil
}
