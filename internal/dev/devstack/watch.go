package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ChildExit is a child of the stack (the broker, the Temporal dev server, a fleet server) that
// ended on its own while the stack ran.
type ChildExit struct {
	Child string
	Err   error // why, with the child's last output
	// Essential: the stack cannot go on without it (the broker, Temporal); a fleet server is not
	Essential bool
}

func (e ChildExit) Error() string { return fmt.Sprintf("dev stack: %s: %v", e.Child, e.Err) }

// Exits reports every child that ends on its own, at once. A stack's own stops and restarts are
// not reported; a fleet server the provisioner shut down is. Nothing is reported after Stop.
func (s *Stack) Exits() <-chan ChildExit { return s.exits }

// report hands an exit to Exits; past its buffer an exit is dropped rather than blocking the
// child's watcher (the first ones say what went wrong).
func (s *Stack) report(e ChildExit) {
	if s.ctx.Err() != nil {
		return
	}
	select {
	case s.exits <- e:
	default:
	}
}

// watchBroker reports the broker ending while its context is live.
func (s *Stack) watchBroker(ctx context.Context, b *Broker) {
	select {
	case <-b.Exited():
		if err := b.Err(); err != nil && ctx.Err() == nil {
			s.report(ChildExit{Child: "broker", Err: err, Essential: true})
		}
	case <-ctx.Done():
	}
}

// watchTemporal reports the dev server ending without Stop.
func (s *Stack) watchTemporal(srv *DevServer) {
	select {
	case <-srv.Exited():
		if err := srv.Err(); err != nil {
			s.report(ChildExit{Child: "Temporal dev server", Err: err, Essential: true})
		}
	case <-s.ctx.Done():
	}
}

// startBroker starts the broker on port. A port taken by another process between choosing and
// binding it is replaced by another one, up to twice, when movable: the provisioning JWT is
// signed again for the new URL before any server reads it. A port fixed by a reused state
// directory or an earlier start (the servers know its URL) is not movable.
func (s *Stack) startBroker(port int, movable bool) error {
	for try := 0; ; try++ {
		bctx, cancel := context.WithCancel(s.ctx)
		b, err := StartBroker(bctx, &s.brokerWG, s.Opts.Dir, "127.0.0.1", port, s.Creds, "warn", filepath.Join(s.Opts.Dir, "broker.log"), BrokerOptions{Streams: s.Opts.Streams})
		if err == nil {
			s.Broker, s.brokerCancel = b, cancel
			go s.watchBroker(bctx, b)
			return nil
		}
		cancel()
		if errors.Is(err, ErrPortInUse) && !movable {
			return fmt.Errorf("%w (the servers know this port: it is kept in %s; free it, or start with a new state directory)",
				err, filepath.Join(s.Opts.Dir, "credentials", "broker.port"))
		}
		if !errors.Is(err, ErrPortInUse) || try == 2 {
			return err
		}
		if port, err = FreePort(); err != nil {
			return err
		}
		if err := s.moveBroker(port); err != nil {
			return fmt.Errorf("moving the broker to port %d: %w", port, err)
		}
	}
}

// moveBroker makes port the broker's in the credentials and the state directory.
func (s *Stack) moveBroker(port int) error {
	if err := s.Creds.SetBrokerURL(fmt.Sprintf("nats://127.0.0.1:%d", port)); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Opts.Dir, "credentials", "broker.port"), []byte(fmt.Sprint(port)), 0o600)
}
