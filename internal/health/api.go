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

// Paths served by Handler.
const (
	LivePath  = "/healthz"
	ReadyPath = "/readyz"
)

// Status is one component's state, since when it has been in it, and why (when not up).
type Status struct {
	State  State     `json:"state"`
	Since  time.Time `json:"since"`
	Detail string    `json:"detail,omitempty"`
}

// Loop is one watched loop: when it last turned, and how long it may go without turning.
type Loop struct {
	Alive    bool      `json:"alive"`
	LastTurn time.Time `json:"last_turn"`
	Stall    string    `json:"stall_after"`
}

// Report is the body of /readyz and /healthz.
type Report struct {
	Ready      bool              `json:"ready"`
	Alive      bool              `json:"alive"`
	Components map[string]Status `json:"components"`
	Loops      map[string]Loop   `json:"loops,omitempty"`
}
