package service

import (
	"context"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/workflows"
)

// cloudLikeOperator refuses to add search attributes, as Temporal Cloud does to a namespace's
// API key, and lists the ones it has.
type cloudLikeOperator struct {
	operatorservice.UnimplementedOperatorServiceServer
	mu       sync.Mutex
	existing map[string]enumspb.IndexedValueType
}

func (o *cloudLikeOperator) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest) (*operatorservice.ListSearchAttributesResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return &operatorservice.ListSearchAttributesResponse{CustomAttributes: maps.Clone(o.existing)}, nil
}

func (o *cloudLikeOperator) AddSearchAttributes(context.Context, *operatorservice.AddSearchAttributesRequest) (*operatorservice.AddSearchAttributesResponse, error) {
	return nil, status.Error(codes.PermissionDenied, "Request unauthorized.")
}

type systemInfoOnly struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (systemInfoOnly) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

// On a frontend that refuses AddSearchAttributes, setup says what to run instead (tcld, with the
// missing attributes), and once they exist it only checks them.
func TestSetupWhereSearchAttributesCannotBeAdded(t *testing.T) {
	ops := &cloudLikeOperator{existing: map[string]enumspb.IndexedValueType{workflows.SearchAttributeNames()[0]: enumspb.INDEXED_VALUE_TYPE_KEYWORD}}
	g := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(g, systemInfoOnly{})
	operatorservice.RegisterOperatorServiceServer(g, ops)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := DialTemporal(ctx, &config.Config{Temporal: config.Temporal{Address: l.Addr().String(), Namespace: "prov.a1b2c", Plaintext: true}}, zap.NewNop())
	require.NoError(t, err)
	defer c.Close()

	err = Setup(ctx, c, "prov.a1b2c", 0)
	require.Error(t, err)
	names := workflows.SearchAttributeNames()
	require.Contains(t, err.Error(), "tcld namespace search-attributes add --namespace prov.a1b2c")
	require.NotContains(t, err.Error(), "--search-attribute "+names[0]+"=Keyword", "the existing one is not added again")
	for _, n := range names[1:] {
		require.Contains(t, err.Error(), "--search-attribute "+n+"=Keyword")
	}
	require.Contains(t, err.Error(), "Cloud UI")

	ops.mu.Lock()
	for _, n := range names {
		ops.existing[n] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	ops.mu.Unlock()
	require.NoError(t, Setup(ctx, c, "prov.a1b2c", 0))
	err = Setup(ctx, c, "prov.a1b2c", 720*time.Hour)
	require.ErrorContains(t, err, "tcld namespace retention set")
}

// Refused signals are logged once an interval, the next line saying how many were not.
func TestThrottleLogsOnceAnInterval(t *testing.T) {
	var th throttle
	at := time.Unix(1_000_000, 0)
	ok, n := th.allow(at, time.Minute)
	require.True(t, ok)
	require.Zero(t, n)
	for i := range 5 {
		ok, _ = th.allow(at.Add(time.Duration(i)*time.Second), time.Minute)
		require.False(t, ok)
	}
	ok, n = th.allow(at.Add(time.Minute), time.Minute)
	require.True(t, ok)
	require.Equal(t, 5, n)
}
