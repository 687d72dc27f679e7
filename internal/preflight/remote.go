package preflight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// checkBroker connects to the broker as the service does (the Choria client configuration, and
// NATS user "provisioner" with broker_provisioning_password), then disconnects. Nothing is
// published or subscribed.
func (r *runner) checkBroker(ctx context.Context, cfg *config.Config) {
	if cfg.ChoriaConfig == "" {
		r.emit(Result{Name: "broker", Status: Fail, Detail: "no Choria client configuration", Fix: "pass --choria-config or set choria_config"})
		return
	}
	fw, err := service.NewChoriaFramework(cfg, r.log)
	if err != nil {
		r.emit(Result{Name: "broker", Status: Fail, Detail: err.Error(), Fix: "correct the Choria client configuration"})
		return
	}
	servers := "(none)"
	if s, err := fw.MiddlewareServers(); err == nil && s.Count() > 0 {
		servers = strings.Join(s.Strings(), ",")
	}
	as := "caller " + fw.CallerID()
	if cfg.BrokerProvisioningPassword != "" {
		as += ", NATS user provisioner"
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	conn, err := fw.NewConnector(ctx, fw.MiddlewareServers, fw.CallerID()+"-check", fw.Logger("check"))
	if err != nil {
		r.emit(Result{Name: "broker", Status: Fail, Detail: fmt.Sprintf("%s as %s: %v", servers, as, err),
			Fix: "check plugin.choria.middleware_hosts in the Choria client configuration, that the broker is up and reachable from here, and that its credentials (and broker_provisioning_password) match the broker's provisioning account"})
		return
	}
	defer conn.Close()
	r.emit(Result{Name: "broker", Status: OK, Detail: fmt.Sprintf("connected to %s as %s", conn.ConnectedServer(), as)})
}

// checkTemporal dials the frontend with the service's own dialer (address, namespace and any
// TLS settings); payload encryption plays no part in connecting and is checked apart.
func (r *runner) checkTemporal(ctx context.Context, cfg *config.Config) client.Client {
	plain := *cfg
	plain.Temporal.Plaintext = true
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	tc, err := service.DialTemporal(ctx, &plain, r.log)
	if err != nil {
		r.emit(Result{Name: "temporal", Status: Fail, Detail: err.Error(),
			Fix: "check temporal.address (and its TLS settings), that the frontend is up, and that this host may reach its gRPC port"})
		return nil
	}
	info, err := tc.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		r.emit(Result{Name: "temporal", Status: Fail, Detail: fmt.Sprintf("%s answered but not GetClusterInfo: %v", cfg.Temporal.Address, err), Fix: "check the credentials Temporal expects of this client"})
		tc.Close()
		return nil
	}
	r.emit(Result{Name: "temporal", Status: OK, Detail: fmt.Sprintf("%s, Temporal server %s", cfg.Temporal.Address, info.GetServerVersion())})
	return tc
}

// checkNamespace says whether the namespace exists, and how long it keeps closed runs (0 when
// it does not say).
func (r *runner) checkNamespace(ctx context.Context, cfg *config.Config, tc client.Client) (bool, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	ns, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Temporal.Namespace})
	var nf *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &nf):
		r.emit(Result{Name: "namespace", Status: Fail, Detail: fmt.Sprintf("%s does not exist", cfg.Temporal.Namespace),
			Fix: fmt.Sprintf("temporal operator namespace create --namespace %s --retention 30d, then choria-provisioner setup", cfg.Temporal.Namespace)})
		return false, 0
	case err != nil:
		r.emit(Result{Name: "namespace", Status: Fail, Detail: fmt.Sprintf("describing %s: %v", cfg.Temporal.Namespace, err), Fix: "check this client's permissions on the namespace"})
		return false, 0
	}
	detail := cfg.Temporal.Namespace
	var retention time.Duration
	if ret := ns.GetConfig().GetWorkflowExecutionRetentionTtl(); ret != nil {
		retention = ret.AsDuration()
		detail += fmt.Sprintf(", closed host workflows kept %s", retention)
	}
	r.emit(Result{Name: "namespace", Status: OK, Detail: detail})
	return true, retention
}

func (r *runner) checkSearchAttributes(ctx context.Context, cfg *config.Config, tc client.Client) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	resp, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: cfg.Temporal.Namespace})
	if err != nil {
		r.emit(Result{Name: "search attributes", Status: Fail, Detail: err.Error(), Fix: "check this client's permissions on the operator service"})
		return
	}
	var missing, wrong []string
	names := workflows.SearchAttributeNames()
	want := workflows.SearchAttributes()
	for _, n := range names {
		t, ok := resp.GetCustomAttributes()[n]
		switch {
		case !ok:
			missing = append(missing, n)
		case t != want[n]:
			wrong = append(wrong, fmt.Sprintf("%s is %s, not %s", n, t, want[n]))
		}
	}
	sort.Strings(missing)
	switch {
	case len(wrong) > 0:
		r.emit(Result{Name: "search attributes", Status: Fail, Detail: strings.Join(wrong, ", "), Fix: "these names are taken with another type on this namespace: use a namespace of the provisioner's own"})
	case len(missing) > 0:
		r.emit(Result{Name: "search attributes", Status: Fail, Detail: "missing on " + cfg.Temporal.Namespace + ": " + strings.Join(missing, ", "),
			Fix: fmt.Sprintf("choria-provisioner setup --config %s (once per namespace)", r.o.ConfigFile)})
	default:
		r.emit(Result{Name: "search attributes", Status: OK, Detail: strings.Join(names, ", ") + " registered"})
	}
}

// checkCodecMatches decrypts the input of the latest host workflow on the task queue: a replica
// whose key file differs from the others' would fail every step it took from them.
func (r *runner) checkCodecMatches(ctx context.Context, cfg *config.Config, tc client.Client, cd *codec.Codec) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	q := hostruns.HostsQuery{TaskQueue: cfg.Temporal.TaskQueue}.String()
	list, _, err := hostruns.Page(ctx, tc, q, nil, 1)
	if err != nil {
		r.emit(Result{Name: "codec", Status: Fail, Detail: fmt.Sprintf("listing host workflows: %v", err), Fix: "check visibility on the namespace (advanced visibility is required)"})
		return
	}
	if len(list) == 0 {
		r.emit(Result{Name: "codec", Status: OK, Detail: fmt.Sprintf("no host workflows on task queue %s yet: nothing to decrypt", cfg.Temporal.TaskQueue)})
		return
	}
	ex := &commonpb.WorkflowExecution{WorkflowId: list[0].WorkflowID, RunId: list[0].RunID}
	hist, err := tc.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{Namespace: cfg.Temporal.Namespace, Execution: ex, MaximumPageSize: 1})
	if err != nil || len(hist.GetHistory().GetEvents()) == 0 {
		r.emit(Result{Name: "codec", Status: Warn, Detail: fmt.Sprintf("could not read the history of %s: %v", ex.GetWorkflowId(), err)})
		return
	}
	in := hist.GetHistory().GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if _, err := cd.Decode(in); err != nil {
		r.emit(Result{Name: "codec", Status: Fail, Detail: fmt.Sprintf("the key file cannot decrypt %s: %v", ex.GetWorkflowId(), err),
			Fix: "use the same codec key file as the other replicas and the codec server"})
		return
	}
	r.emit(Result{Name: "codec", Status: OK, Detail: fmt.Sprintf("the keys decrypt the latest host workflow (%s)", ex.GetWorkflowId())})
}
