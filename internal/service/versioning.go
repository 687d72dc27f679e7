package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"
	"golang.org/x/mod/semver"
)

// Worker Versioning (temporal.worker_versioning; docs/architecture.md, "Upgrading the
// workflow"): every replica's worker is a version of the site's Worker Deployment, its build ID
// the provisioner's version. Runs are AUTO_UPGRADE: once a build is current, every run's next
// workflow task goes to a replica of that build, and none to an older one, so a run the new
// build has touched is never replayed by code that does not know its changes.

// developmentBuild is the build ID of a provisioner built without a version (go build).
const developmentBuild = "development"

// DeploymentName is the Worker Deployment of the replicas serving a task queue: its name,
// without the '.' and ':' a deployment name cannot hold.
func DeploymentName(taskQueue string) string {
	return strings.NewReplacer(".", "-", ":", "-").Replace(taskQueue)
}

// buildID is the build ID of a provisioner of version.
func buildID(version string) string {
	if version == "" {
		return developmentBuild
	}
	return version
}

// deploymentOptions put a worker of version on the task queue's deployment.
func deploymentOptions(taskQueue, version string) worker.DeploymentOptions {
	return worker.DeploymentOptions{
		UseVersioning: true,
		Version:       worker.WorkerDeploymentVersion{DeploymentName: DeploymentName(taskQueue), BuildID: buildID(version)},
		// a deferred host can wait for hours: its run must move to the new build, since the
		// package upgrade leaves no replica of the old one to finish it
		DefaultVersioningBehavior: workflow.VersioningBehaviorAutoUpgrade,
	}
}

// newerBuild says whether build a is a later release than b, by semantic-version precedence
// (scripts/version.sh: X.Y.Z, or X.Y.Z-dev.N+gSHA between releases; the SHA does not order). A
// build that is not a version (developmentBuild) is older than any that is.
func newerBuild(a, b string) bool {
	va, vb := "v"+a, "v"+b
	switch {
	case !semver.IsValid(va):
		return false
	case !semver.IsValid(vb):
		return true
	}
	return semver.Compare(va, vb) > 0
}

// promoteTimeout bounds how long a starting replica tries to make its build current: the
// server takes the version only once it has seen its pollers, a second or so after the start.
const promoteTimeout = time.Minute

// promotion is what a starting replica found and did about the deployment's current version.
type promotion struct {
	Previous string // the current build before (empty: none)
	Current  string // the current build after
	Promoted bool   // this replica made its build current
}

// promote makes build the current version of deployment unless the current one is the same
// build or a newer one: the newest build a replica runs wins, whatever order replicas start in,
// and an older replica restarted during a rolling upgrade does not take the fleet back. A rollback
// to an older build is an operator's decision: `temporal worker deployment set-current-version`.
func promote(ctx context.Context, tc client.Client, deployment, build string) (promotion, error) {
	ctx, cancel := context.WithTimeout(ctx, promoteTimeout)
	defer cancel()
	h := tc.WorkerDeploymentClient().GetHandle(deployment)
	for {
		p, err := promoteOnce(ctx, h, build)
		if err == nil || permanent(err) {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("making build %s current in worker deployment %s: %w", build, deployment, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func promoteOnce(ctx context.Context, h client.WorkerDeploymentHandle, build string) (promotion, error) {
	d, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return promotion{}, err // NotFound until the server has seen the first replica's pollers
	}
	var p promotion
	if cur := d.Info.RoutingConfig.CurrentVersion; cur != nil {
		p.Previous = cur.BuildID
	}
	p.Current = p.Previous
	if p.Previous == build || (p.Previous != "" && !newerBuild(build, p.Previous)) {
		return p, nil
	}
	// the conflict token: of two replicas promoting at once, the one that read an older state
	// fails and reads again; IgnoreMissingTaskQueues: a queue this build's configuration no
	// longer polls (helper_rate_limit turned off) is not one it needs
	_, err = h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{
		BuildID: build, ConflictToken: d.ConflictToken, IgnoreMissingTaskQueues: true})
	if err != nil {
		return p, err // FailedPrecondition or NotFound until the server has seen this build's pollers
	}
	p.Current, p.Promoted = build, true
	return p, nil
}

// permanent errors are not cured by waiting: no such API on the server, no permission to use it.
func permanent(err error) bool {
	var unimplemented *serviceerror.Unimplemented
	var denied *serviceerror.PermissionDenied
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &unimplemented) || errors.As(err, &denied) || errors.As(err, &invalid)
}

// settleVersion makes this replica's build current when it is the newest, and says what that
// means for this replica. It runs before discovery starts: a run discovery starts eagerly has its
// first workflow task in this process, which must then be of the current build or an older one.
func (s *Service) settleVersion(ctx context.Context, tc client.Client) {
	deployment, build := DeploymentName(s.cfg.Temporal.TaskQueue), buildID(s.opts.Version)
	log := s.log.With(zap.String("deployment", deployment), zap.String("build", build))
	p, err := promote(ctx, tc, deployment, build)
	switch {
	case err != nil:
		log.Error("could not make this build the worker deployment's current version: hosts run on the current build's replicas",
			zap.String("current", p.Current), zap.Error(err))
	case p.Promoted:
		log.Info("this build is the worker deployment's current version: every host's next workflow task runs on it",
			zap.String("previous", p.Previous))
	case p.Current != build:
		log.Warn("a newer build is the worker deployment's current version: this replica runs no host until it is upgraded",
			zap.String("current", p.Current))
	default:
		log.Info("this build is the worker deployment's current version")
	}
}

// warnUnversioned says when this unversioned replica gets no host: a build of the deployment is
// current (worker_versioning was on), so Temporal routes every run to that build's replicas.
func (s *Service) warnUnversioned(ctx context.Context, tc client.Client) {
	deployment := DeploymentName(s.cfg.Temporal.TaskQueue)
	d, err := tc.WorkerDeploymentClient().GetHandle(deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil || d.Info.RoutingConfig.CurrentVersion == nil {
		return // no deployment, or its unversioned workers are current: this replica gets its share
	}
	s.log.Error("temporal.worker_versioning is off but a build is the worker deployment's current version: this replica runs no host until "+
		"`temporal worker deployment set-current-version --deployment-name "+deployment+" --unversioned` (or worker_versioning is on again)",
		zap.String("deployment", deployment), zap.String("current", d.Info.RoutingConfig.CurrentVersion.BuildID))
}
