package devstack

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/choria-io/go-choria/broker/network"
	"github.com/choria-io/go-choria/choria"
	"github.com/choria-io/go-choria/config"
	"github.com/choria-io/tokens"
	"github.com/sirupsen/logrus"

	"github.com/choria-temporal/provisioner/common/auditlog"
)

// Broker is an in-process Choria Network Broker with a provisioning account, listening on loopback.
type Broker struct {
	Port      int
	StatsPort int
	URL       string
	srv       *network.Server
	out       *tailWriter   // its last log lines
	exited    chan struct{} // closed when the broker stopped or hit a fatal error
	once      sync.Once
	err       error // why it ended, set before exited is closed; nil when its context ended it
}

// ErrPortInUse is a broker that lost its port to another process between choosing and binding it.
var ErrPortInUse = errors.New("the broker's port was taken by another process")

// FreePort asks the kernel for an unused loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BrokerOptions are what a broker runs beyond the provisioning account.
type BrokerOptions struct {
	// Streams turns Choria Streams (JetStream, for the choria account) on, stored under dir:
	// the audit sink on a stream needs it. Off by default: its start costs nothing measurable
	// (54 ms both ways), but go-choria then writes every lifecycle event to a stream of its own,
	// a load the flood tests need not carry.
	Streams bool
}

// StartBroker writes a broker config into dir and starts the broker; it stops when ctx ends.
// The broker may share the dev process with the provisioner: it is a NATS server, not a Choria
// server instance, and keeps none of the process-wide provisioning state.
// listen is 127.0.0.1 everywhere but in containers. A broker that fails to bind its port returns
// at once with its last output (an error wrapping ErrPortInUse when the port was taken); one that
// fails later closes Exited.
func StartBroker(ctx context.Context, wg *sync.WaitGroup, dir string, listen string, port int, creds *Credentials, logLevel string, logFile string, opts ...BrokerOptions) (*Broker, error) {
	statsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	streams := ""
	if len(opts) > 0 && opts[0].Streams {
		streams = fmt.Sprintf("plugin.choria.network.stream.store = %s\n", filepath.Join(dir, "streams"))
	}
	cfgFile := filepath.Join(dir, "broker.conf")
	cfg := fmt.Sprintf(`identity = broker.local
loglevel = %s
plugin.choria.broker_network = true
plugin.choria.network.listen_address = %s
plugin.choria.network.client_port = %d
plugin.choria.network.peer_port = 0
plugin.choria.stats_address = 127.0.0.1
plugin.choria.stats_port = %d
%splugin.choria.network.provisioning.client_password = %s
plugin.choria.use_srv = false
%s`, logLevel, listen, port, statsPort, creds.BrokerSecurity(), creds.ProvisioningPassword, streams)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	bcfg, err := config.NewSystemConfig(cfgFile, true)
	if err != nil {
		return nil, fmt.Errorf("broker config: %w", err)
	}
	b := &Broker{Port: port, StatsPort: statsPort, URL: fmt.Sprintf("nats://127.0.0.1:%d", port), out: &tailWriter{max: 4096}, exited: make(chan struct{})}
	logger, closeLog, err := b.logger(logLevel, logFile)
	if err != nil {
		return nil, err
	}
	bcfg.CustomLogger = logger
	fw, err := choria.NewWithConfig(bcfg)
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("broker framework: %w", err)
	}
	if b.srv, err = network.NewServer(fw, fw.BuildInfo(), false); err != nil {
		closeLog()
		return nil, fmt.Errorf("broker: %w", err)
	}
	running := &sync.WaitGroup{}
	running.Add(1)
	go b.srv.Start(ctx, running)
	go func() {
		running.Wait()
		closeLog()
		b.end(ctx, errors.New("the broker stopped"))
	}()
	if err := b.waitListening(ctx, 20*time.Second); err != nil {
		return nil, err
	}
	// the caller waits for a broker that started; one that failed ends by itself (go-choria
	// waits a minute for a listener that will never come)
	wg.Add(1)
	go func() { running.Wait(); wg.Done() }()
	return b, nil
}

// logger is the broker's own logger, to logFile (else its warnings to stderr) and its tail. go-choria's
// would exit the whole process on the NATS server's fatal errors (a port it cannot bind): this
// one records the error and ends the broker alone.
func (b *Broker) logger(level, file string) (*logrus.Logger, func(), error) {
	l := logrus.New()
	if lv, err := logrus.ParseLevel(level); err == nil {
		l.SetLevel(lv)
	}
	out, closeLog := io.Writer(os.Stderr), func() {}
	if file == "" {
		l.SetLevel(logrus.WarnLevel) // a broker of its own (compose) logs what goes wrong
	} else {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, nil, err
		}
		out, closeLog = f, func() { _ = f.Close() }
	}
	l.SetOutput(io.MultiWriter(out, b.out))
	l.ExitFunc = func(code int) { b.end(context.Background(), fmt.Errorf("fatal error (exit %d)", code)) }
	return l, closeLog, nil
}

// end records why the broker ended, once; a broker whose context ended was stopped on purpose.
func (b *Broker) end(ctx context.Context, why error) {
	b.once.Do(func() {
		if ctx.Err() == nil {
			b.err = fmt.Errorf("%w; its last output: %q", why, b.out.String())
			if strings.Contains(b.out.String(), "address already in use") {
				b.err = fmt.Errorf("%w: %w", ErrPortInUse, b.err)
			}
		}
		close(b.exited)
	})
}

// waitListening waits until the NATS server is ready for connections. Not a dial of the port:
// another process holding the port would answer it.
func (b *Broker) waitListening(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !b.srv.Started() {
		select {
		case <-b.exited:
			if b.Err() == nil {
				return ctx.Err()
			}
			return fmt.Errorf("broker on port %d: %w", b.Port, b.Err())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker on port %d not ready within %v; its last output: %q", b.Port, timeout, b.out.String())
		}
	}
	return nil
}

// Exited is closed when the broker has ended: stopped by its context, or failed (Err).
func (b *Broker) Exited() <-chan struct{} { return b.exited }

// Err is why the broker ended, with its last output; nil while it runs or when its context
// stopped it.
func (b *Broker) Err() error {
	select {
	case <-b.exited:
		return b.err
	default:
		return nil
	}
}

// grantAuditStream signs the provisioner's JWT again with what the audit sink on a stream needs
// in the choria account, and no more: Streams user (read the stream, no purge, no stream
// update or delete), publishing to the audit subject, and creating the default audit stream
// (only creating: the stream's own deny_delete and deny_purge then hold against it). A site
// grants the same with choria jwt client --stream-user --publish ... (docs/operations.md). With
// PKI the broker does not restrict a verified client: nothing to grant.
func (c *Credentials) grantAuditStream() error {
	if c.Mode == ModePKI {
		return nil
	}
	raw, err := os.ReadFile(c.ProvisionerJWT)
	if err != nil {
		return err
	}
	claims, err := tokens.ParseClientIDTokenUnverified(string(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", c.ProvisionerJWT, err)
	}
	if claims.Permissions == nil {
		claims.Permissions = &tokens.ClientPermissions{}
	}
	claims.Permissions.StreamsUser = true
	for _, subj := range []string{auditlog.StreamSubject, "$JS.API.STREAM.CREATE." + auditlog.DefaultStream} {
		if !slices.Contains(claims.AdditionalPublishSubjects, subj) {
			claims.AdditionalPublishSubjects = append(claims.AdditionalPublishSubjects, subj)
		}
	}
	seed, err := os.ReadFile(c.IssuerSeed)
	if err != nil {
		return err
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(seed)))
	if err != nil || len(b) != ed25519.SeedSize {
		return fmt.Errorf("%s holds no ed25519 seed", c.IssuerSeed)
	}
	issuer := ed25519.NewKeyFromSeed(b)
	if err := claims.AddOrgIssuerData(issuer); err != nil {
		return fmt.Errorf("chain data for provisioner token: %w", err)
	}
	return signTo(claims, issuer, c.ProvisionerJWT)
}
