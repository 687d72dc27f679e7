package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/choria-io/fisk"

	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/service"
)

// registerBans adds the commands that write to the audit sink, never to Temporal: a ban, its
// lifting and a host's retirement are the provisioner's own entries, authenticated with the
// audit key, that no namespace writer can make, lift or undo.
func (h *hostsCommand) registerBans(hosts *fisk.CmdClause) {
	ban := hosts.Command("ban", "Issue no identity to these hosts again, whatever the helper says, until unban (audited; needs audit.sink)")
	ban.Arg("identity", "Host identities").Required().StringsVar(&h.identities)
	ban.Flag("reason", "Why, recorded in the audit").StringVar(&h.reason)
	unban := hosts.Command("unban", "Lift the ban of these hosts (audited)")
	unban.Arg("identity", "Host identities").Required().StringsVar(&h.identities)
	unban.Flag("reason", "Why, recorded in the audit").StringVar(&h.reason)
	retire := hosts.Command("retire", "These hosts are gone for good: no renewal, no alert, off the identity listings until provisioned again (audited)")
	retire.Arg("identity", "Host identities").Required().StringsVar(&h.identities)
	retire.Flag("reason", "Why, recorded in the audit").StringVar(&h.reason)
	hosts.Command("bans", "List the banned and the retired hosts, from the audit sink")
}

// isBanCommand is a command of registerBans: it needs the audit sink, not Temporal.
func isBanCommand(cmd string) bool {
	switch cmd {
	case "ban", "unban", "retire", "bans":
		return true
	}
	return false
}

func (h *hostsCommand) banCommand(ctx context.Context, cmd string) error {
	cfg, err := config.LoadForOperator(h.config)
	if err != nil {
		return err
	}
	audit, err := service.OpenAudit(cfg, "operator:"+whoami())
	if err != nil {
		return err
	}
	if audit == nil || audit.Index == nil {
		return fmt.Errorf("hosts %s needs an audit sink the workers read back (audit.sink: file or stream)", cmd)
	}
	defer audit.Close()
	if cmd == "bans" {
		return h.listBans(ctx, audit.Index)
	}
	kind := map[string]string{"ban": auditlog.KindBanned, "unban": auditlog.KindUnbanned, "retire": auditlog.KindRetired}[cmd]
	for _, id := range h.identities {
		e, err := audit.Log.Append(ctx, auditlog.Entry{Kind: kind, Identity: id, Reason: h.reason})
		if err != nil {
			return err
		}
		fmt.Fprintf(h.out, "%s %s (audit entry %d)\n", kind, id, e.Seq)
	}
	return nil
}

func (h *hostsCommand) listBans(ctx context.Context, x *auditlog.Index) error {
	all, err := x.All(ctx)
	if err != nil {
		return err
	}
	var out []auditlog.HostState
	for _, st := range all {
		if st.Banned || st.Retired {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	if h.json {
		enc := json.NewEncoder(h.out)
		for _, st := range out {
			if err := enc.Encode(st); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(h.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "IDENTITY\tSTATE\tSINCE\tBY\tREASON")
	for _, st := range out {
		state := "banned"
		if st.Retired {
			state = "retired"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", safe(st.Identity), state, st.Since.UTC().Format(time.RFC3339), safe(st.By), safe(st.Reason))
	}
	if n := x.Unproven(); n > 0 {
		fmt.Fprintf(w, "(%d entries of the sink do not verify under the audit key and were not read: audit --verify)\n", n)
	}
	return w.Flush()
}
