package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/internal/service"
)

// listExpiring is `hosts list --expiring D`: the identities hosts hold now that expire within D.
func (h *hostsCommand) listExpiring(ctx context.Context, op *operator.Operator) error {
	within, err := config.ParseDuration(h.expiring)
	if err != nil || within <= 0 {
		return fmt.Errorf("%w: --expiring %q is not a positive duration (30d, 12h, 3m)", operator.ErrBadFilter, h.expiring)
	}
	if h.filter.Outcome != "" || h.filter.Step != "" || h.page.Token != "" {
		// an identity is a provisioned run's: outcome and step are given, and the listing is one page
		return fmt.Errorf("%w: --expiring goes with --site, --text and --limit only", operator.ErrBadFilter)
	}
	hosts, err := op.Expiring(ctx, operator.ExpiringFilter{Within: within, Site: h.filter.Site, Text: h.filter.Text, Limit: h.page.Limit})
	if err != nil {
		return err
	}
	if hosts, err = h.recordedExpiring(ctx, within, hosts); err != nil {
		return err
	}
	if h.json {
		return jsonLines(h.out, hosts)
	}
	return h.printIdentities(hosts, time.Now())
}

// printIdentities is the table of an --expiring listing.
func (h *hostsCommand) printIdentities(hosts []operator.Host, now time.Time) error {
	w := tabwriter.NewWriter(h.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "IDENTITY\tEXPIRES\tIN\tISSUED\tSIGNER")
	for _, x := range hosts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", safe(x.Identity), stamp(x.IdentityExpires), expiresIn(x.IdentityExpires, now),
			stamp(x.IdentityIssued), safe(x.IdentitySigner))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(h.out, "%d hosts\n", len(hosts))
	return nil
}

// stamp is a time as the identity listings print it: local, to the second ("-" when unknown).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// expiresIn says how long an identity has left at now, "expired" once it has none.
func expiresIn(expires, now time.Time) string {
	left := expires.Sub(now)
	switch {
	case expires.IsZero():
		return "-"
	case left <= 0:
		return "expired"
	case left >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(left/(24*time.Hour)))
	case left >= time.Hour:
		return left.Round(time.Minute).String()
	default:
		return left.Round(time.Second).String()
	}
}

// identityLines are `hosts show`'s lines of the identity the run issued.
func identityLines(w *tabwriter.Writer, d *operator.Detail, now time.Time) {
	if d.IdentityExpires.IsZero() {
		return
	}
	fmt.Fprintf(w, "Identity issued:\t%s\n", d.IdentityIssued.Local().Format(time.RFC3339))
	fmt.Fprintf(w, "Identity expires:\t%s (%s)\n", d.IdentityExpires.Local().Format(time.RFC3339), inWords(d.IdentityExpires, now))
	fmt.Fprintf(w, "Identity signer:\t%s\n", safe(d.IdentitySigner))
}

// inWords is expiresIn as a phrase: "in 2m59s", "expired".
func inWords(expires, now time.Time) string {
	if s := expiresIn(expires, now); s != "expired" {
		return "in " + s
	}
	return "expired"
}

// recordedExpiring is the --expiring listing from the audit sink's records, when the
// configuration has a sink that reads back: every identity a host holds that the provisioner
// issued, however long ago its run was deleted, retired hosts left out, and of runs the hosts
// the sink has no issuance of (issued before it was on). runs as they are without such a sink.
func (h *hostsCommand) recordedExpiring(ctx context.Context, within time.Duration, runs []operator.Host) ([]operator.Host, error) {
	cfg, err := config.LoadForOperator(h.config)
	if err != nil {
		return nil, err
	}
	if cfg.Audit.Sink == "" || cfg.Audit.Sink == "stdout" {
		return runs, nil
	}
	audit, err := service.OpenAudit(cfg, "operator:"+whoami())
	if err != nil {
		return nil, err
	}
	defer audit.Close()
	recs, err := audit.Index.Expiring(ctx, time.Now().Add(within), h.filter.Site)
	if err != nil {
		return nil, fmt.Errorf("the audit sink's records: %w", err)
	}
	all, err := audit.Index.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("the audit sink's records: %w", err)
	}
	out := []operator.Host{}
	for _, r := range recs {
		if h.filter.Text == "" || strings.Contains(r.Identity, h.filter.Text) {
			out = append(out, operator.Host{Identity: r.Identity, IdentityIssued: r.Issued, IdentityExpires: r.Expires, IdentitySigner: r.Signer})
		}
	}
	for _, x := range runs {
		if st := all[x.Identity]; st.Issued.IsZero() && !st.Retired {
			out = append(out, x)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].IdentityExpires.Before(out[j].IdentityExpires) })
	if h.page.Limit > 0 && len(out) > h.page.Limit {
		out = out[:h.page.Limit]
	}
	return out, nil
}
