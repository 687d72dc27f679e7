package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows"
)

// PauseCacheTTL bounds how stale discovery's view of the pause state may be.
const PauseCacheTTL = 2 * time.Second

// PauseState reads the control workflow's pause state, cached for ttl so that a burst of startup
// events does not become a burst of queries.
type PauseState struct {
	c         client.Client
	taskQueue string
	ttl       time.Duration

	mu     sync.Mutex
	read   time.Time
	paused bool
}

// NewPauseState reads the pause state of taskQueue through c.
func NewPauseState(c client.Client, taskQueue string, ttl time.Duration) *PauseState {
	return &PauseState{c: c, taskQueue: taskQueue, ttl: ttl}
}

// Paused reports whether provisioning on the task queue is paused. No control workflow means
// never paused.
func (p *PauseState) Paused(ctx context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.read.IsZero() && time.Since(p.read) < p.ttl {
		return p.paused, nil
	}
	state, err := ReadControlState(ctx, p.c, p.taskQueue)
	if err != nil {
		return false, err
	}
	p.paused, p.read = state.Paused, time.Now()
	return p.paused, nil
}

// ReadControlState queries the control workflow of taskQueue.
func ReadControlState(ctx context.Context, c client.Client, taskQueue string) (workflows.ControlState, error) {
	var state workflows.ControlState
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, workflows.ControlWorkflowID(taskQueue), "", workflows.ControlStateQuery)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return state, nil
	}
	if err != nil {
		return state, err
	}
	return state, v.Get(&state)
}
