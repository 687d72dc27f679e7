package workflows

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
)

// pollersOf answers DescribeTaskQueue with the given poller identities (or err).
type pollersOf struct {
	workflowservice.WorkflowServiceClient
	identities []string
	err        error
	calls      int
}

func (p *pollersOf) DescribeTaskQueue(context.Context, *workflowservice.DescribeTaskQueueRequest, ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error) {
	p.calls++
	if p.err != nil {
		return nil, p.err
	}
	resp := &workflowservice.DescribeTaskQueueResponse{}
	for _, id := range p.identities {
		resp.Pollers = append(resp.Pollers, &taskqueuepb.PollerInfo{Identity: id})
	}
	return resp, nil
}

type serviceClient struct {
	client.Client
	ws workflowservice.WorkflowServiceClient
}

func (c serviceClient) WorkflowService() workflowservice.WorkflowServiceClient { return c.ws }

func TestWorkerIdentityCarriesTheVersion(t *testing.T) {
	require.Equal(t, CurrentVersion, versionOfIdentity(WorkerIdentity("123@host")))
	require.Equal(t, VersionLean, versionOfIdentity("123@host@"), "a build before the tag runs VersionLean")
	require.Equal(t, VersionLean, versionOfIdentity("123@host wfx"))
	require.Equal(t, 7, versionOfIdentity("123@host wf7"))
}

// New runs get the newest version every polling worker runs: one worker of an older build holds
// them at its version; none at all gives VersionLean.
func TestRunnableVersionIsTheOldestWorkers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		identities []string
		want       int
	}{
		{"all current", []string{WorkerIdentity("1@a"), WorkerIdentity("2@b")}, CurrentVersion},
		{"one older build", []string{WorkerIdentity("1@a"), "2@b@"}, VersionLean},
		{"a newer build", []string{WorkerIdentity("1@a"), "2@b wf99"}, CurrentVersion},
		{"no worker", nil, VersionLean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, n, err := RunnableVersion(context.Background(), serviceClient{ws: &pollersOf{identities: tc.identities}}, "default", "q")
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			require.Equal(t, len(tc.identities), n)
		})
	}
}

func TestVersionGateCachesAndKeepsItsAnswerOnErrors(t *testing.T) {
	ws := &pollersOf{identities: []string{WorkerIdentity("1@a")}}
	var errs []error
	g := NewVersionGate(serviceClient{ws: ws}, "default", "q", func(err error) { errs = append(errs, err) })
	require.Equal(t, CurrentVersion, g.Version(context.Background()))
	require.Equal(t, CurrentVersion, g.Version(context.Background()))
	require.Equal(t, 1, ws.calls, "read once per VersionGateTTL")

	ws.err = errors.New("unavailable")
	g.read = g.read.Add(-VersionGateTTL)
	require.Equal(t, CurrentVersion, g.Version(context.Background()), "the last answer stays")
	require.Len(t, errs, 1)

	empty := &pollersOf{}
	g = NewVersionGate(serviceClient{ws: empty}, "default", "q", nil)
	require.Equal(t, VersionLean, g.Version(context.Background()))
	require.Equal(t, VersionLean, g.Version(context.Background()))
	require.Equal(t, 2, empty.calls, "no worker yet: asked again")
}
