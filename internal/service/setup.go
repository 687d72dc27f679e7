package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/choria-temporal/provisioner/workflows"
)

// Setup prepares a namespace for the provisioner: registers the custom search attributes
// (tolerating ones that exist) and, when retention > 0, sets how long closed host workflows are
// kept. It is idempotent.
func Setup(ctx context.Context, c client.Client, namespace string, retention time.Duration) error {
	attrs := workflows.SearchAttributes()
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
			if refusedOperation(err) {
				return fmt.Errorf("registering search attributes: the frontend does not let this client add them (on Temporal Cloud only the Cloud control plane does): "+
					"add them with `%s`, or in the Cloud UI (Namespace, Search Attributes, with the types the command names), then run setup again to check: %w",
					tcldAddCommand(namespace, attrs), err)
			}
			return fmt.Errorf("registering search attributes: %w", err)
		}
	}
	if retention > 0 {
		_, err = c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
			Namespace: namespace,
			Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(retention)},
		})
		if err != nil {
			if refusedOperation(err) {
				return fmt.Errorf("setting retention on namespace %s: refused (on Temporal Cloud: tcld namespace retention set --namespace %s --retention-days N, or the Cloud UI; run setup without --retention): %w",
					namespace, namespace, err)
			}
			return fmt.Errorf("setting retention on namespace %s: %w", namespace, err)
		}
	}
	return nil
}

// refusedOperation says the frontend will not do this for this client (Temporal Cloud refuses
// namespace administration through the operator and namespace APIs to namespace API keys).
func refusedOperation(err error) bool {
	var denied *serviceerror.PermissionDenied
	var unimplemented *serviceerror.Unimplemented
	return errors.As(err, &denied) || errors.As(err, &unimplemented) || status.Code(err) == codes.Unauthenticated
}

// tcldAddCommand is the tcld command line that adds the missing search attributes on Temporal Cloud.
func tcldAddCommand(namespace string, attrs map[string]enumspb.IndexedValueType) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	cmd := "tcld namespace search-attributes add --namespace " + namespace
	for _, n := range names {
		cmd += " --search-attribute " + n + "=" + typeName(attrs[n])
	}
	return cmd
}

// typeName is how tcld and the temporal CLI name a search attribute type.
func typeName(t enumspb.IndexedValueType) string {
	if t == enumspb.INDEXED_VALUE_TYPE_DATETIME {
		return "Datetime"
	}
	return "Keyword"
}
