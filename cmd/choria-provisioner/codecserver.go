package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/common/logging"
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
	devTrust  bool
	login     bool
	ttl       time.Duration
	devUIDs   []uint32
	issuer    string
	audience  string
	claim     string
	values    []string
	anyUser   bool
	refetch   time.Duration
	tlsCert   string
	tlsKey    string
}

func (c *codecServerCommand) register(app *fisk.Application) {
	cmd := app.Command("codec-server", "Serves the remote codec API (decrypts payloads for authorised Web UI and CLI users)")
	configFlag(cmd, "Provisioner configuration (for the codec keys)", &c.config)
	cmd.Flag("listen", "Listen address").Default("127.0.0.1:8081").StringVar(&c.listen)
	cmd.Flag("token-file", "File holding the bearer token callers must present (or "+codec.ServerTokenEnv+")").StringVar(&c.tokenFile)
	cmd.Flag("cors-origin", "Web UI origin allowed to call it, e.g. http://127.0.0.1:8233 (repeatable)").StringsVar(&c.origins)
	cmd.Flag("oidc-issuer", "Also accept access tokens of this OIDC issuer, as a Web UI with a login passes them (TEMPORAL_CODEC_PASS_ACCESS_TOKEN)").StringVar(&c.issuer)
	cmd.Flag("oidc-audience", "The audience those access tokens must carry").StringVar(&c.audience)
	cmd.Flag("oidc-claim", "The claim of those access tokens that grants decoding, e.g. groups, roles or realm_access.roles (required with --oidc-issuer unless --oidc-any-user)").StringVar(&c.claim)
	cmd.Flag("oidc-claim-value", "A value of --oidc-claim that grants decoding, e.g. temporal-operators (repeatable: any one grants)").StringsVar(&c.values)
	cmd.Flag("oidc-any-user", "Accept every user the issuer gives a token for the audience, no claim required: each can decrypt every payload").UnNegatableBoolVar(&c.anyUser)
	cmd.Flag("oidc-key-refetch-interval", "Fetch the issuer's key set at most this often (a token naming an unknown key asks for it)").Default(codec.DefaultKeyRefetchInterval.String()).DurationVar(&c.refetch)
	cmd.Flag("tls-cert", "Serve HTTPS with this certificate (PEM; re-read when it changes), e.g. from the CA the Web UI and operators already trust").StringVar(&c.tlsCert)
	cmd.Flag("tls-key", "The --tls-cert certificate's private key (PEM)").StringVar(&c.tlsKey)
	cmd.Flag("browser-login", "Serve "+codec.LoginPath+": a browser that presents the token there gets a session cookie, which a Web UI without a login sends from the --cors-origin origins (TEMPORAL_CODEC_INCLUDE_CREDENTIALS=true)").UnNegatableBoolVar(&c.login)
	cmd.Flag("session-ttl", "With --browser-login: how long a session lasts from its login (it also ends at "+codec.LogoutPath+" and when the server stops)").Default(codec.DefaultSessionTTL.String()).DurationVar(&c.ttl)
	cmd.Flag("dev-trust-origins", "DEVELOPMENT ONLY: decode without a token for browsers from the --cors-origin origins run by this user (a Web UI without login); loopback --listen only").UnNegatableBoolVar(&c.devTrust)
	cmd.Flag("dev-trust-uid", "With --dev-trust-origins: the user ID whose browser is served (repeatable; default: this process's user)").Uint32ListVar(&c.devUIDs)
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
	o, scheme, err := c.serverOptions(ctx, cfg, token)
	if err != nil {
		return err
	}
	addr, err := codec.Serve(ctx, c.listen, cd, o)
	if err != nil {
		return err
	}
	c.banner(scheme, addr, cd.ActiveKeyID(), o)
	<-ctx.Done()
	return nil
}

// serverOptions turns the flags into the server's options and the scheme it serves.
func (c *codecServerCommand) serverOptions(ctx context.Context, cfg *config.Config, token string) (codec.ServerOptions, string, error) {
	o := codec.ServerOptions{Token: token, Origins: c.origins, DevTrustOrigins: c.devTrust, DevTrustUIDs: c.devUIDs, BrowserLogin: c.login, SessionTTL: c.ttl}
	if c.login && len(c.origins) == 0 {
		return o, "", errors.New("--browser-login needs the Web UI's origins (--cors-origin): its sessions are good from there only")
	}
	if c.ttl <= 0 {
		return o, "", fmt.Errorf("--session-ttl %s: a session must end: give a positive duration", c.ttl)
	}
	var err error
	if c.issuer != "" || c.audience != "" || c.claim != "" || len(c.values) > 0 || c.anyUser {
		o.OIDC, err = codec.NewOIDCVerifier(ctx, codec.OIDCOptions{Issuer: c.issuer, Audience: c.audience,
			Claim: c.claim, Values: c.values, AnyUser: c.anyUser, KeyRefetchInterval: c.refetch})
		if err != nil {
			return o, "", err
		}
	}
	if c.tlsCert == "" && c.tlsKey == "" {
		return o, "http", nil
	}
	if c.tlsCert == "" || c.tlsKey == "" {
		return o, "", errors.New("--tls-cert and --tls-key go together")
	}
	log, err := logging.New(cfg.Loglevel, "-") // reloads and their failures, on stderr
	if err != nil {
		return o, "", err
	}
	o.TLS, err = service.ServerTLS(c.tlsCert, c.tlsKey, log)
	return o, "https", err
}

// banner says where the server listens and whom it serves (never the token).
func (c *codecServerCommand) banner(scheme, addr, keyID string, o codec.ServerOptions) {
	fmt.Printf("codec server on %s://%s (key %s)\n", scheme, addr, keyID)
	if o.OIDC != nil {
		who := fmt.Sprintf("whose claim %s holds one of %s", c.claim, strings.Join(c.values, ", "))
		if c.anyUser {
			who = "of every user (--oidc-any-user: no claim required)"
		}
		fmt.Printf("accepting access tokens of %s for audience %s %s\n", c.issuer, c.audience, who)
	}
	if c.login {
		fmt.Printf("browser login at %s://%s%s for the Web UI at %s (sessions last %s; log out at %s)\n", scheme, addr, codec.LoginPath,
			strings.Join(c.origins, ", "), c.ttl, codec.LogoutPath)
	}
	if c.devTrust {
		who := fmt.Sprintf("user %d", os.Getuid())
		if len(c.devUIDs) > 0 {
			who = fmt.Sprintf("user IDs %v", c.devUIDs)
		}
		fmt.Printf("DEVELOPMENT MODE: browsers of %s from %s are served without a token (loopback only); everyone else needs the bearer token\n",
			who, strings.Join(c.origins, ", "))
	}
}
