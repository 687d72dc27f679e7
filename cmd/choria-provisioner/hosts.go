package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/choria-io/fisk"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/choria-temporal/provisioner/common/reprovision"
	"github.com/choria-temporal/provisioner/common/textsafe"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// Exit codes of the hosts commands.
const (
	exitError       = 1
	exitUnknownHost = 2
	exitUnreachable = 3
)

// hostsCommand is the operator CLI: it talks to Temporal (and Choria for reprovision), never to a
// provisioner process.
type hostsCommand struct {
	config       string
	choriaConfig string
	json         bool
	filter       operator.Filter
	identities   []string
	failed       bool
	renewal      string // list --renewal: "failed"
	reason       string
	timeout      time.Duration
	page         operator.Page
	expiring     string // hosts list --expiring: a config.ParseDuration
	dryRun       bool
	countReqs    bool
	requests     *requestCounter
	out          io.Writer
	// progress is where a bulk retry draws its progress bar: stderr when stdout and stderr are
	// terminals, else nowhere (a `\r` redrawn bar in a log or a pipe is noise)
	progress io.Writer
}

func (h *hostsCommand) register(app *fisk.Application) {
	h.out = os.Stdout
	if terminal(os.Stdout) && terminal(os.Stderr) {
		h.progress = os.Stderr
	}
	hosts := app.Command("hosts", "Inspect and repair hosts through Temporal")
	configFlag(hosts, "Provisioner configuration file (its temporal section and codec key are used)", &h.config)
	hosts.Flag("json", "JSON output: one object a line").UnNegatableBoolVar(&h.json)
	hosts.Flag("count-requests", "Print the Temporal requests the command made, by method, on stderr").Hidden().UnNegatableBoolVar(&h.countReqs)

	list := hosts.Command("list", "List hosts, the latest run of each: open runs first, then the most recently closed")
	h.filterFlags(list)
	list.Flag("text", "Only identities containing this text").StringVar(&h.filter.Text)
	list.Flag("limit", "At most this many hosts, and the token of the next page (0: all)").IntVar(&h.page.Limit)
	list.Flag("after", "Continue a listing from the page token an earlier one printed").StringVar(&h.page.Token)
	list.Flag("expiring", "Only hosts whose current identity expires within this duration (30d, 12h, 3m), the expired ones included; soonest first").PlaceHolder("DURATION").StringVar(&h.expiring)
	list.Flag("no-reasons", "Skip the failed hosts' reasons read from their histories (runs that recorded no error type, terminated runs)").UnNegatableBoolVar(&h.page.NoReasons)
	list.Flag("full-reasons", "Read every failed host's full reason from its history (a read each), not only its error type and step").UnNegatableBoolVar(&h.page.FullReasons)

	show := hosts.Command("show", "Show a host's status and step timeline")
	show.Arg("identity", "Host identity").Required().StringsVar(&h.identities)

	retry := hosts.Command("retry", "Start failed hosts again (one, several, or --failed)")
	retry.Arg("identity", "Host identities").StringsVar(&h.identities)
	retry.Flag("failed", "Retry every host whose latest run, a provisioner's, failed; at new_hosts_rate").UnNegatableBoolVar(&h.failed)
	retry.Flag("dry-run", "With --failed: say which hosts would be retried and skipped, start none").UnNegatableBoolVar(&h.dryRun)
	h.filterFlags(retry)
	retry.Flag("text", "Only identities containing this text").StringVar(&h.filter.Text)

	repro := hosts.Command("reprovision", "Ask provisioned servers to re-enter provisioning mode (Choria RPC); each is then provisioned again")
	repro.Arg("identity", "Host identities").Required().StringsVar(&h.identities)
	repro.Flag("choria-config", "Choria client configuration that reaches provisioned servers").Required().StringVar(&h.choriaConfig)
	repro.Flag("timeout", "How long to wait for replies").Default("10s").DurationVar(&h.timeout)

	cancel := hosts.Command("cancel", "Cancel a host's running workflow")
	cancel.Arg("identity", "Host identities").Required().StringsVar(&h.identities)

	pause := hosts.Command("pause", "Pause provisioning fleet-wide: no new hosts start, running hosts hold before their next step")
	pause.Flag("reason", "Why, recorded in the control workflow").StringVar(&h.reason)
	hosts.Command("resume", "Resume provisioning fleet-wide")
	hosts.Command("paused", "Say whether provisioning is paused")
	h.registerBans(hosts)
	h.registerRenewal(hosts, list)
}

func (h *hostsCommand) filterFlags(cmd *fisk.CmdClause) {
	cmd.Flag("outcome", "Only hosts with this outcome (running, deferred, failed, provisioned, shutdown; failed is every run closed without completing)").StringVar(&h.filter.Outcome)
	cmd.Flag("step", "Only hosts at this step").StringVar(&h.filter.Step)
	cmd.Flag("site", "Only hosts of this site").StringVar(&h.filter.Site)
}

// run executes the subcommand and returns the process exit code.
func (h *hostsCommand) run(ctx context.Context, cmd string) int {
	if h.countReqs {
		h.requests = &requestCounter{}
		defer h.requests.print(os.Stderr)
	}
	err := h.dispatch(ctx, strings.TrimPrefix(cmd, "hosts "))
	switch {
	case err == nil:
		return 0
	case errors.Is(err, operator.ErrUnknownHost):
		fmt.Fprintln(os.Stderr, "choria-provisioner:", err)
		return exitUnknownHost
	case errors.Is(err, operator.ErrUnreachable):
		fmt.Fprintln(os.Stderr, "choria-provisioner:", err)
		return exitUnreachable
	default:
		fmt.Fprintln(os.Stderr, "choria-provisioner:", err)
		return exitError
	}
}

func (h *hostsCommand) operator(ctx context.Context) (*operator.Operator, func(), error) {
	cfg, err := config.LoadForOperator(h.config)
	if err != nil {
		return nil, nil, err
	}
	dc, _, err := service.DataConverter(cfg)
	if err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var dial []grpc.DialOption
	if h.requests != nil {
		dial = append(dial, grpc.WithChainUnaryInterceptor(h.requests.intercept))
	}
	c, err := service.DialTemporalWith(dctx, cfg, zap.NewNop(), dial...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", operator.ErrUnreachable, err)
	}
	return &operator.Operator{C: c, DC: dc, Starter: service.Starter(cfg), TaskQueue: cfg.Temporal.TaskQueue, Namespace: cfg.Temporal.Namespace,
		StartRate: cfg.NewHostsRate, StartBurst: cfg.NewHostsBurst}, c.Close, nil
}

func (h *hostsCommand) dispatch(ctx context.Context, cmd string) error {
	if cmd == "reprovision" {
		return h.reprovision(ctx)
	}
	if isBanCommand(cmd) {
		return h.banCommand(ctx, cmd)
	}
	op, closer, err := h.operator(ctx)
	if err != nil {
		return err
	}
	defer closer()
	if sub, ok := strings.CutPrefix(cmd, "renewal "); ok {
		return h.renewalCommand(ctx, op, sub)
	}
	switch cmd {
	case "list":
		return h.list(ctx, op)
	case "show":
		return h.show(ctx, op)
	case "retry":
		return h.retry(ctx, op)
	case "cancel":
		for _, id := range h.identities {
			if err := op.Cancel(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(h.out, "canceled %s\n", id)
		}
		return nil
	case "pause", "resume":
		n, err := op.SetPaused(ctx, cmd == "pause", whoami(), h.reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(h.out, "provisioning %sd on task queue %s; %d running hosts signaled\n", cmd, op.TaskQueue, n)
		return nil
	case "paused":
		st, err := op.Control().State(ctx)
		if err != nil {
			return err
		}
		if h.json {
			return json.NewEncoder(h.out).Encode(st)
		}
		if st.Paused {
			fmt.Fprintf(h.out, "paused since %s by %s: %s\n", st.Since.Format(time.RFC3339), safe(st.By), safe(st.Reason))
		} else {
			fmt.Fprintln(h.out, "not paused")
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// list is `hosts list`: the hosts, or with --expiring their identities, or with --renewal the
// failed renewals.
func (h *hostsCommand) list(ctx context.Context, op *operator.Operator) error {
	switch {
	case h.expiring != "":
		return h.listExpiring(ctx, op)
	case h.renewal != "":
		return h.listRenewalFailed(ctx, op)
	}
	l, err := op.ListPage(ctx, h.filter, h.page)
	if err != nil {
		return err
	}
	return h.printListing(l)
}

func whoami() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "operator"
}

// jsonLines writes each of xs as a line of JSON (JSON lines, for a SIEM or jq).
func jsonLines[T any](w io.Writer, xs []T) error {
	enc := json.NewEncoder(w)
	for _, x := range xs {
		if err := enc.Encode(x); err != nil {
			return err
		}
	}
	return nil
}

// printListing prints a page of hosts and, when there are more, the token of the next: with
// --json, a host a line and then {"next": token}.
func (h *hostsCommand) printListing(l *operator.Listing) error {
	if h.json {
		if err := jsonLines(h.out, l.Hosts); err != nil {
			return err
		}
		if l.Next != "" {
			return json.NewEncoder(h.out).Encode(map[string]string{"next": l.Next})
		}
		return nil
	}
	if err := h.printHosts(l.Hosts); err != nil {
		return err
	}
	if l.Next != "" {
		fmt.Fprintf(h.out, "more: --after %s\n", l.Next)
	}
	return nil
}

func (h *hostsCommand) printHosts(hosts []operator.Host) error {
	w := tabwriter.NewWriter(h.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "IDENTITY\tSITE\tOUTCOME\tSTEP\tSTATUS\tRUNS\tSTARTED\tREASON")
	for _, x := range hosts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", safe(x.Identity), safe(x.Site), safe(x.Outcome), safe(x.Step), x.Status, x.Runs,
			x.Started.Local().Format("2006-01-02 15:04:05"), textsafe.Clean(x.Reason, 100))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(h.out, "%d hosts\n", len(hosts))
	return nil
}

// safe is text of the hosts' or of a workflow's making as a terminal may show it: no control
// characters or escape sequences (a host's status message, a helper's stderr, an identity),
// at most 1 KiB. JSON output escapes them instead.
func safe(s string) string { return textsafe.Clean(s, 1024) }

func (h *hostsCommand) show(ctx context.Context, op *operator.Operator) error {
	d, err := op.Show(ctx, h.identities[0])
	if err != nil {
		return err
	}
	if h.json {
		return json.NewEncoder(h.out).Encode(d)
	}
	return h.printDetail(d)
}

func (h *hostsCommand) printDetail(d *operator.Detail) error {
	w := tabwriter.NewWriter(h.out, 0, 2, 2, ' ', 0)
	fmt.Fprintf(w, "Identity:\t%s\n", safe(d.Identity))
	fmt.Fprintf(w, "Workflow:\t%s (run %s)\n", safe(d.WorkflowID), d.RunID)
	fmt.Fprintf(w, "Site:\t%s\n", safe(d.Site))
	if d.Foreign != "" {
		fmt.Fprintf(w, "Started by:\tsomeone else, %s\n", safe(d.Foreign))
	}
	fmt.Fprintf(w, "Status:\t%s, outcome %s, step %s\n", d.Host.Status, safe(d.Outcome), safe(d.Step))
	fmt.Fprintf(w, "Started:\t%s\n", d.Started.Local().Format(time.RFC3339))
	if !d.Closed.IsZero() {
		fmt.Fprintf(w, "Closed:\t%s (%s)\n", d.Closed.Local().Format(time.RFC3339), d.Closed.Sub(d.Started).Round(time.Millisecond))
	}
	if d.Reason != "" {
		fmt.Fprintf(w, "Reason:\t%s\n", safe(d.Reason))
	}
	identityLines(w, d, time.Now())
	if st := d.State; st != nil {
		if st.HelperDecision != "" {
			fmt.Fprintf(w, "Helper:\t%s: %s\n", st.HelperDecision, safe(st.HelperMessage))
		}
		if st.ServerVersion != "" {
			fmt.Fprintf(w, "Server version:\t%s\n", safe(st.ServerVersion))
		}
		fmt.Fprintf(w, "Found:\t%s, defers %d, paused %v\n", found(st), st.Defers, st.Paused)
		if st.LastError != "" {
			fmt.Fprintf(w, "Last error:\t%s\n", safe(st.LastError))
		}
	}
	for _, p := range d.Pending {
		fmt.Fprintf(w, "In flight:\t%s attempt %d %s\n", safe(p.Activity), p.Attempt, safe(p.LastFailure))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if d.State != nil && len(d.State.Timeline) > 0 {
		return h.timeline(d.State.Timeline)
	}
	return nil
}

// timeline prints a run's steps, one a line.
func (h *hostsCommand) timeline(steps []workflows.StepRecord) error {
	fmt.Fprintln(h.out, "\nTimeline:")
	tw := tabwriter.NewWriter(h.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "  STEP\tSTARTED\tTOOK\tATTEMPTS\tERROR OR NOTE")
	for _, r := range steps {
		took := ""
		if !r.Ended.IsZero() {
			took = r.Ended.Sub(r.Started).Round(time.Millisecond).String()
		}
		attempts := "-"
		if r.Attempts > 0 {
			attempts = fmt.Sprint(r.Attempts)
		}
		msg := r.Error
		if msg == "" {
			msg = r.Note
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", safe(r.Step), r.Started.Local().Format("15:04:05.000"), took, attempts, safe(msg))
	}
	return tw.Flush()
}

func (h *hostsCommand) retry(ctx context.Context, op *operator.Operator) error {
	if h.failed {
		return h.retryFailed(ctx, op)
	}
	if len(h.identities) == 0 {
		return errors.New("name the hosts to retry, or use --failed")
	}
	if h.dryRun {
		return errors.New("--dry-run goes with --failed")
	}
	for _, id := range h.identities {
		if err := op.Retry(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(h.out, "retrying %s\n", id)
	}
	return nil
}

// retryFailed retries the failed hosts and says which it skipped: any skipped host makes the
// command fail, so that a script or a pipeline sees it.
func (h *hostsCommand) retryFailed(ctx context.Context, op *operator.Operator) error {
	start := time.Now()
	req := operator.RetryRequest{Filter: h.filter, DryRun: h.dryRun}
	if h.progress != nil {
		req.Prog = func(done, total int) {
			fmt.Fprintf(h.progress, "\rretrying failed hosts %s %d/%d", bar(done, total, 30), done, total)
		}
	}
	sum, err := op.Retries(ctx, req)
	if h.progress != nil && !h.dryRun {
		fmt.Fprintln(h.progress)
	}
	if err != nil {
		return err
	}
	if err := h.printRetries(sum, time.Since(start)); err != nil {
		return err
	}
	if len(sum.Skipped) > 0 {
		return fmt.Errorf("%d of %d failed hosts skipped", len(sum.Skipped), len(sum.Skipped)+len(sum.Retried))
	}
	return nil
}

// printRetries prints a bulk retry's summary: with --json, a line a host, {"identity", "action"
// (retried, would-retry, skipped), "reason"}.
func (h *hostsCommand) printRetries(sum *operator.RetrySummary, took time.Duration) error {
	skipped := make([]string, 0, len(sum.Skipped))
	for id := range sum.Skipped {
		skipped = append(skipped, id)
	}
	sort.Strings(skipped)
	verb := "retried"
	if sum.DryRun {
		verb = "would-retry"
	}
	if h.json {
		type line struct {
			Identity string `json:"identity"`
			Action   string `json:"action"`
			Reason   string `json:"reason,omitempty"`
		}
		enc := json.NewEncoder(h.out)
		for _, id := range sum.Retried {
			if err := enc.Encode(line{Identity: id, Action: verb}); err != nil {
				return err
			}
		}
		for _, id := range skipped {
			if err := enc.Encode(line{Identity: id, Action: "skipped", Reason: sum.Skipped[id]}); err != nil {
				return err
			}
		}
		return nil
	}
	if sum.DryRun {
		for _, id := range sum.Retried {
			fmt.Fprintf(h.out, "would retry %s\n", safe(id))
		}
		fmt.Fprintf(h.out, "would retry %d hosts", len(sum.Retried))
	} else {
		fmt.Fprintf(h.out, "retried %d hosts in %v", len(sum.Retried), took.Round(time.Millisecond))
	}
	if len(skipped) == 0 {
		fmt.Fprintln(h.out)
		return nil
	}
	fmt.Fprintf(h.out, ", skipped %d:\n", len(skipped))
	for _, id := range skipped {
		fmt.Fprintf(h.out, "  %s: %s\n", safe(id), safe(sum.Skipped[id]))
	}
	return nil
}

func bar(done, total, width int) string {
	if total == 0 {
		return "[" + strings.Repeat("=", width) + "]"
	}
	n := done * width / total
	return "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + "]"
}

func (h *hostsCommand) reprovision(ctx context.Context) error {
	cfg, err := config.LoadForOperator(h.config)
	if err != nil {
		return err
	}
	fw, err := service.NewFleetClientFramework(cfg, h.choriaConfig)
	if err != nil {
		return err
	}
	res, err := reprovision.Ask(ctx, fw, cfg.Token, h.identities, h.timeout)
	if err != nil {
		return err
	}
	failed := 0
	for _, id := range h.identities {
		if res[id] != nil {
			failed++
			fmt.Fprintf(h.out, "%s: %s\n", safe(id), safe(res[id].Error()))
		} else {
			fmt.Fprintf(h.out, "%s: restarting into provisioning mode\n", id)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d hosts could not be reprovisioned", failed, len(h.identities))
	}
	return nil
}

// found says how the run's sighting was made, and when.
func found(st *workflows.Status) string {
	if st.SeenAt.IsZero() {
		return "by " + st.Source
	}
	return fmt.Sprintf("by %s at %s", st.Source, st.SeenAt.Local().Format(time.RFC3339))
}
