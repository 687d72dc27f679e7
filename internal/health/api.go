// Package health is the provisioner's /healthz and /readyz: whether the process is alive (its
// loops turn) and whether it is ready (each component it runs says so). Health is read from the
// components themselves: the service reports what they observe (a poll answered, a connection
// up, a loop turned), never what it expects of them.
package health

import "time"

// State is a component's state.
type State string

// Component states. Only Up counts as ready.
const (
	Starting State = "starting" // registered, nothing observed yet
	Up       State = "up"
	Down     State = "down"
)

// The components a provisioner process reports (those it runs).
const (
	// Temporal: the worker polls its task queue (a process without a worker: the frontend answers)
	Temporal = "temporal"
	// Broker: the process's connections to the Choria broker are up
	Broker = "broker"
	// Discovery: discovery listens for startup events and its loop turns
	Discovery = "discovery"
)

// Log fields of a component's change of state (its error text is logging.FieldDetail).
const (
	FieldComponent = "component"
	FieldState     = "state"
)

// Paths served by Handler.
const (
	LivePath  = "/healthz"
	ReadyPath = "/readyz"
)

// Status is one component's state, since when it has been in it, and why (when not up).
// Detail is the component's error text, which may name addresses, users and files: it is in the
// process's log and in Report for callers in the process, never in what Handler serves.
type Status struct {
	State  State     `json:"state"`
	Since  time.Time `json:"since"`
	Detail string    `json:"-"`
}

// Loop is one watched loop: when it last turned, and how long it may go without turning.
type Loop struct {
	Alive    bool      `json:"alive"`
	LastTurn time.Time `json:"last_turn"`
	Stall    string    `json:"stall_after"`
}

// Report is the body of /readyz and /healthz. What it says is for anyone who can reach the
// listener: states, names and times, no error text.
type Report struct {
	// Status says it in words: "ready", or "not ready: broker, temporal" (the components not
	// up), or "not alive: probe:broker" (the loops that stalled)
	Status     string            `json:"status"`
	Ready      bool              `json:"ready"`
	Alive      bool              `json:"alive"`
	Components map[string]Status `json:"components"`
	Loops      map[string]Loop   `json:"loops,omitempty"`
}
