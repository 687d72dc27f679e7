package workflows

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// A worker says which command sequences it runs in its identity, which Temporal lists for every
// poller of a task queue: starters read it there, so that no run is started with a version that
// a worker of an older build would run the old way (and that the newer workers then could not
// replay) during a rolling upgrade.
const identityVersionTag = " wf"

// WorkerIdentity is the identity a worker of this build polls with: base and CurrentVersion.
func WorkerIdentity(base string) string {
	return fmt.Sprintf("%s%s%d", base, identityVersionTag, CurrentVersion)
}

// versionOfIdentity is the newest version a poller runs: a build without it in its identity
// is older than VersionQuietHelper and runs VersionLean (older runs it recognises by markers).
func versionOfIdentity(identity string) int {
	i := strings.LastIndex(identity, identityVersionTag)
	if i < 0 {
		return VersionLean
	}
	v, err := strconv.Atoi(identity[i+len(identityVersionTag):])
	if err != nil || v < VersionLean {
		return VersionLean
	}
	return v
}

// RunnableVersion is the newest version every worker that polled the task queue lately runs
// (Temporal lists the pollers of the last minutes), at most CurrentVersion; pollers is how many
// there were. With none, VersionLean: a worker that comes later may be an old one.
func RunnableVersion(ctx context.Context, c client.Client, namespace, taskQueue string) (version, pollers int, err error) {
	resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace: namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: taskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enumspb.TASK_QUEUE_TYPE_WORKFLOW,
	})
	if err != nil {
		return VersionLean, 0, fmt.Errorf("listing the workers of task queue %s: %w", taskQueue, err)
	}
	version = CurrentVersion
	for _, p := range resp.GetPollers() {
		version = min(version, versionOfIdentity(p.GetIdentity()))
	}
	if len(resp.GetPollers()) == 0 {
		version = VersionLean
	}
	return version, len(resp.GetPollers()), nil
}

// VersionGateTTL is how long a VersionGate trusts what it read: starters ask at every start.
const VersionGateTTL = 10 * time.Second

// VersionGate caches RunnableVersion for the starters of one task queue.
type VersionGate struct {
	c         client.Client
	namespace string
	taskQueue string
	onError   func(error)

	mu      sync.Mutex
	version int
	read    time.Time
}

// NewVersionGate reads the task queue's pollers at most every VersionGateTTL; onError (may be
// nil) hears of a failed read, after which the gate keeps its last answer (at first VersionLean).
func NewVersionGate(c client.Client, namespace, taskQueue string, onError func(error)) *VersionGate {
	return &VersionGate{c: c, namespace: namespace, taskQueue: taskQueue, onError: onError, version: VersionLean}
}

// Version is the version to start a new run with.
func (g *VersionGate) Version(ctx context.Context) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.read.IsZero() && time.Since(g.read) < VersionGateTTL {
		return g.version
	}
	v, pollers, err := RunnableVersion(ctx, g.c, g.namespace, g.taskQueue)
	switch {
	case err != nil:
		g.read = time.Now() // not a read per start while Temporal is unreachable
		if g.onError != nil {
			g.onError(err)
		}
	case pollers > 0:
		g.version, g.read = v, time.Now()
	default:
		g.version = v // no worker yet: asked again at the next start
	}
	return g.version
}
