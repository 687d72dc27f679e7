package preflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/renewal"
)

// checkRenewal says whether the task queue's renewal Schedule is what the configuration asks
// for (setup makes it so), and warns when the namespace keeps closed runs for less than
// server_jwt_validity: an identity's record (its run) would be deleted before it expires, and
// neither the listings nor renewal would see it any more.
func (r *runner) checkRenewal(ctx context.Context, cfg *config.Config, tc client.Client, retention time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	id := renewal.ScheduleID(cfg.Temporal.TaskQueue)
	desc, err := tc.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	var notFound *serviceerror.NotFound
	fix := fmt.Sprintf("choria-provisioner setup --config %s", r.o.ConfigFile)
	switch {
	case errors.As(err, &notFound) && cfg.Renewal.Enabled:
		r.emit(Result{Name: "renewal", Status: Fail, Detail: "renewal is enabled but there is no Schedule " + id + ": nothing renews", Fix: fix})
	case errors.As(err, &notFound):
		r.emit(Result{Name: "renewal", Status: OK, Detail: "off (no Schedule " + id + ")"})
	case err != nil:
		r.emit(Result{Name: "renewal", Status: Warn, Detail: fmt.Sprintf("describing the Schedule %s: %v", id, err)})
	case !cfg.Renewal.Enabled:
		r.emit(Result{Name: "renewal", Status: Warn, Detail: "renewal is off here but the Schedule " + id + " exists (its runs renew nothing in a replica with renewal off)", Fix: fix + " (deletes it)"})
	case desc.Schedule.State != nil && desc.Schedule.State.Paused:
		r.emit(Result{Name: "renewal", Status: Warn, Detail: fmt.Sprintf("the Schedule %s is paused: %s", id, desc.Schedule.State.Note),
			Fix: "choria-provisioner hosts renewal resume"})
	default:
		r.emit(Result{Name: "renewal", Status: OK, Detail: fmt.Sprintf("Schedule %s, renewing identities %v before they expire, %g hosts a minute",
			id, cfg.Renewal.RenewBeforeDuration, cfg.Renewal.Rate)})
	}
	if retention > 0 && cfg.Features.ED25519 && retention < cfg.ServerJWTValidityDuration {
		r.emit(Result{Name: "identity record", Status: Warn,
			Detail: fmt.Sprintf("closed host workflows are kept %v, server JWTs last %v: an identity's record is deleted before it expires", retention, cfg.ServerJWTValidityDuration),
			Fix:    fmt.Sprintf("choria-provisioner setup --retention %v (or a shorter server_jwt_validity)", cfg.ServerJWTValidityDuration)})
	}
}
