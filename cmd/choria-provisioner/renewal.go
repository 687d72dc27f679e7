package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/common/textsafe"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/renewal"
)

// errRenewalsFailed makes `hosts list --renewal failed` exit 1 when it lists a host, so that a
// cron job or a check can act on it.
var errRenewalsFailed = errors.New("hosts failed renewal")

func (h *hostsCommand) registerRenewal(hosts *fisk.CmdClause, list *fisk.CmdClause) {
	list.Flag("renewal", "Only hosts whose renewal failed (failed): the latest renewal run's failures not provisioned since, and "+
		"failed runs a renewal started; exits 1 when it lists any").EnumVar(&h.renewal, "failed")
	ren := hosts.Command("renewal", "The renewal Schedule of the task queue (renewal: in the configuration)")
	p := ren.Command("pause", "Pause the renewal Schedule: no renewal run starts until resumed")
	p.Flag("reason", "Why, recorded in the Schedule's note").StringVar(&h.reason)
	r := ren.Command("resume", "Resume the renewal Schedule")
	r.Flag("reason", "Why, recorded in the Schedule's note").StringVar(&h.reason)
	ren.Command("status", "Show the renewal Schedule (paused, interval, latest runs) and its latest completed run's result")
}

// renewalCommand runs `hosts renewal pause|resume|status`.
func (h *hostsCommand) renewalCommand(ctx context.Context, op *operator.Operator, sub string) error {
	switch sub {
	case "pause", "resume":
		note := strings.TrimSpace(whoami() + ": " + h.reason)
		if err := renewal.SetPaused(ctx, op.C, op.TaskQueue, sub == "pause", note); err != nil {
			return err
		}
		fmt.Fprintf(h.out, "renewal %sd on task queue %s (Schedule %s)\n", sub, op.TaskQueue, renewal.ScheduleID(op.TaskQueue))
		return nil
	case "status":
		st, err := renewal.Describe(ctx, op.C, op.TaskQueue)
		if err != nil {
			return err
		}
		if h.json {
			return json.NewEncoder(h.out).Encode(st)
		}
		h.printRenewalStatus(st)
		return nil
	}
	return fmt.Errorf("unknown command %q", "renewal "+sub)
}

func (h *hostsCommand) printRenewalStatus(st *renewal.Status) {
	state := "active"
	if st.Paused {
		state = "paused"
	}
	fmt.Fprintf(h.out, "Schedule %s: %s", st.ScheduleID, state)
	if st.Note != "" {
		fmt.Fprintf(h.out, " (%s)", safe(st.Note))
	}
	fmt.Fprintf(h.out, "\ninterval: %v", st.Interval)
	if !st.Next.IsZero() && !st.Paused {
		fmt.Fprintf(h.out, ", next run %s", st.Next.Local().Format(time.RFC3339))
	}
	fmt.Fprintln(h.out)
	for _, r := range st.Recent {
		fmt.Fprintf(h.out, "started %s: %s\n", r.Started.Local().Format(time.RFC3339), safe(r.WorkflowID))
	}
	l := st.Latest
	if l == nil {
		fmt.Fprintln(h.out, "no renewal run has completed yet")
		return
	}
	res := l.Result
	fmt.Fprintf(h.out, "latest completed run %s at %s: found %d, renewed %d, failed %d", safe(l.WorkflowID), l.Closed.Local().Format(time.RFC3339),
		res.Found, res.Renewed, len(res.Failed))
	if len(res.Expired) > 0 {
		fmt.Fprintf(h.out, ", %d had expired already", len(res.Expired))
	}
	if res.Skipped != "" {
		fmt.Fprintf(h.out, ", skipped: %s", safe(res.Skipped))
	}
	fmt.Fprintln(h.out)
	for _, f := range res.Failed {
		fmt.Fprintf(h.out, "  %s: %s: %s\n", safe(f.Identity), f.Outcome, textsafe.Clean(f.Reason, 200))
	}
}

// listRenewalFailed prints the hosts whose renewal failed; errRenewalsFailed when there are any.
func (h *hostsCommand) listRenewalFailed(ctx context.Context, op *operator.Operator) error {
	hosts, err := renewal.Failed(ctx, op.C, op.TaskQueue)
	if err != nil {
		return err
	}
	if h.json {
		if err := jsonLines(h.out, hosts); err != nil {
			return err
		}
	} else {
		w := tabwriter.NewWriter(h.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(w, "IDENTITY\tOUTCOME\tEXPIRES\tAT\tREASON")
		for _, x := range hosts {
			expires := "-"
			if !x.Expires.IsZero() {
				expires = x.Expires.Local().Format(time.RFC3339)
			}
			if x.Expired {
				expires += " (expired)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", safe(x.Identity), x.Outcome, expires, x.At.Local().Format(time.RFC3339), textsafe.Clean(x.Reason, 100))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(h.out, "%d hosts\n", len(hosts))
	}
	if len(hosts) > 0 {
		return fmt.Errorf("%w: %d", errRenewalsFailed, len(hosts))
	}
	return nil
}
