package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/choria-temporal/provisioner/workflows"
)

// Setup prepares a namespace for the provisioner: registers the custom search attributes
// (tolerating ones that exist) and, when retention > 0, sets how long closed host workflows are
// kept. It is idempotent.
func Setup(ctx context.Context, c client.Client, namespace string, retention time.Duration) error {
	attrs := map[string]enumspb.IndexedValueType{}
	for _, n := range workflows.SearchAttributeNames() {
		attrs[n] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	existing, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("listing search attributes: %w", err)
	}
	for n := range existing.GetCustomAttributes() {
		delete(attrs, n)
	}
	if len(attrs) > 0 {
		_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: attrs})
		var exists *serviceerror.AlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("registering search attributes: %w", err)
		}
	}
	if retention > 0 {
		_, err = c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
			Namespace: namespace,
			Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(retention)},
		})
		if err != nil {
			return fmt.Errorf("setting retention on namespace %s: %w", namespace, err)
		}
	}
	return nil
}
