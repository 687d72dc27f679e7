// Package discovery finds Choria Servers waiting in provisioning mode, by broadcast discovery
// every interval and by lifecycle startup events, and hands every sighting to Temporal as a
// signal-with-start of the host's workflow. It keeps no queue and no host state: any number of
// replicas may run it at once.
package discovery

import (
	"errors"
	"fmt"

	"github.com/choria-io/go-choria/lifecycle"

	"github.com/choria-temporal/provisioner/workflows"
)

// ProvisioningCollective is where unprovisioned servers wait.
const ProvisioningCollective = "provisioning"

// ProvisionAgent is the agent every server in provisioning mode serves.
const ProvisionAgent = "choria_provision"

// EventQueueGroup spreads lifecycle events over the replicas: each event reaches one of them.
const EventQueueGroup = "choria-temporal-provisioner"

// MaxEventSize bounds what is parsed from the wire; a startup event is a few hundred bytes.
const MaxEventSize = 16 << 10

// ErrBadEvent classifies lifecycle messages that are not startup events of a valid identity.
var ErrBadEvent = errors.New("unusable lifecycle event")

// StartupSubject is the subject of startup events of component.
func StartupSubject(component string) string {
	return "choria.lifecycle.event.startup." + component
}

// ParseStartupEvent returns the identity in a lifecycle startup event of component, or an error
// wrapping ErrBadEvent that says what is wrong with it.
func ParseStartupEvent(data []byte, component string) (string, error) {
	if len(data) > MaxEventSize {
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadEvent, len(data), MaxEventSize)
	}
	ev, err := lifecycle.NewFromJSON(data)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if ev.Type() != lifecycle.Startup {
		return "", fmt.Errorf("%w: type %s, want startup", ErrBadEvent, ev.TypeString())
	}
	if ev.Component() != component {
		return "", fmt.Errorf("%w: component %q, want %q", ErrBadEvent, ev.Component(), component)
	}
	id := ev.Identity()
	if err := workflows.ValidateIdentity(id); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	return id, nil
}
