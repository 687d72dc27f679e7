package service

import (
	"fmt"
	"regexp"
	"syscall"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// This file maps the configuration file onto each part's own settings: the packages below take
// theirs in their own terms and never read the file's layout.

// Policy is what this process's configuration decides about the runs its worker begins.
func Policy(cfg *config.Config) workflows.Policy {
	return workflows.Policy{
		Site: cfg.Site,
		Features: workflows.Features{JWT: cfg.Features.JWT, ED25519: cfg.Features.ED25519, PKI: cfg.Features.PKI,
			Upgrades: cfg.Features.Upgrades, UpgradesOptional: cfg.UpgradesOptional},
		DeferDelay:  cfg.DeferDelayDuration,
		Fast:        cfg.Temporal.FastMode,
		HelperQueue: cfg.HelperRateLimit > 0,
	}
}

// Starter is how this process's discovery and operator commands start host runs.
func Starter(cfg *config.Config) hostruns.Starter {
	return hostruns.Starter{TaskQueue: cfg.Temporal.TaskQueue, Site: cfg.Site, Fast: cfg.Temporal.FastMode}
}

// HelperTaskSlots is how many helper tasks one process takes from the helper task queue at once:
// twice workers. workers itself bounds the helper processes (the semaphore in
// activities.RunHelper), but a task holds its slot for longer than its helper runs: from the poll
// that brings it to the completion that reports it, each a round trip to a server that in a burst
// is the busiest part of the system (docs/performance.md).
func HelperTaskSlots(workers int) int { return 2 * workers }

// ActivitySettings are what cfg gives the activities: the helper gets the base variables
// (config.HelperBaseEnv) and those helper_env names, and cert_deny_list is compiled here, its
// /re/ form unwrapped, so that a CSR is checked against patterns known to be valid.
func ActivitySettings(cfg *config.Config) (activities.Settings, error) {
	deny := make([]*regexp.Regexp, 0, len(cfg.CertDenyList))
	for _, entry := range cfg.CertDenyList {
		re, err := regexp.Compile(config.TrimRegex(entry))
		if err != nil {
			return activities.Settings{}, fmt.Errorf("cert_deny_list entry %q: %w", entry, err)
		}
		deny = append(deny, re)
	}
	var helperUser *syscall.Credential
	if c := cfg.HelperCredential; c != nil {
		helperUser = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	return activities.Settings{
		HelperCredential: helperUser,
		Site:             cfg.Site, Token: cfg.Token, RPCTimeout: cfg.RPCTimeoutDuration,
		JWTVerifyCert: cfg.JWTVerifyCert, CertDenyList: deny, UpgradesRepository: cfg.UpgradesRepository,
		HelperCommand: cfg.HelperCommand, HelperTimeout: cfg.HelperTimeoutDuration,
		HelperEnv:     append(append([]string(nil), config.HelperBaseEnv...), cfg.HelperEnv...),
		JWTSigningKey: cfg.JWTSigningKey, JWTSigningToken: cfg.JWTSigningToken, ServerJWTValidity: cfg.ServerJWTValidityDuration,
	}, nil
}

// DrainTimeout bounds how long a stopping worker waits for its running steps (an RPC waits
// rpc_timeout, a helper helper_timeout; both default to 10 s).
const DrainTimeout = 20 * time.Second

// WorkerOptions are the Temporal worker's options from the configuration.
func WorkerOptions(cfg *config.Config) worker.Options {
	return worker.Options{
		// on SIGTERM, steps in flight get this long to finish before the worker lets go of them
		WorkerStopTimeout:                  DrainTimeout,
		MaxConcurrentActivityTaskPollers:   cfg.Temporal.ActivityPollers,
		MaxConcurrentWorkflowTaskPollers:   cfg.Temporal.WorkflowPollers,
		MaxConcurrentActivityExecutionSize: cfg.Temporal.MaxConcurrentActivities,
		// fast mode's local steps are RPCs too: the same bound
		MaxConcurrentLocalActivityExecutionSize: cfg.Temporal.MaxConcurrentActivities,
	}
}
