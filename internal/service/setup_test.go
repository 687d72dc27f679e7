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
	want := workflows.SearchAttributes()
	first := workflows.SearchAttributeNames()[0]
	ops := &cloudLikeOperator{existing: map[string]enumspb.IndexedValueType{first: want[first]}}
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
	require.NotContains(t, err.Error(), "--search-attribute "+names[0]+"=", "the existing one is not added again")
	for _, n := range names[1:] {
		require.Contains(t, err.Error(), "--search-attribute "+n+"="+typeName(want[n]))
	}
	require.Contains(t, err.Error(), "--search-attribute IdentityIssued=Datetime")
	require.Contains(t, err.Error(), "Cloud UI")

	ops.mu.Lock()
	for _, n := range names {
		ops.existing[n] = want[n]
	}
	ops.mu.Unlock()
	require.NoError(t, Setup(ctx, c, "prov.a1b2c", 0))
	err = Setup(ctx, c, "prov.a1b2c", 720*time.Hour)
	require.ErrorContains(t, err, "tcld namespace retention set")
}
