package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
)

// StepHelper is the step as status, search attributes and logs name it; RunHelperName its activity.
const StepHelper, RunHelperName = "helper", "RunHelper"

// maxConfigurationJSON is the most the configure action accepts.
const maxConfigurationJSON = 2048

// RunHelper runs the site helper for one host.
func (a *Activities) RunHelper(ctx context.Context, req HelperRequest) (*HelperOutput, error) {
	input := req.Input
	if input.JWT != nil && req.HadToken {
		claims := *input.JWT
		claims.Token = a.set.Token
		input.JWT = &claims
	}
	if err := a.helpers.take(ctx); err != nil {
		return nil, err
	}
	defer a.helpers.release()
	start := time.Now()
	out, err := a.helper.Run(ctx, input)
	a.metrics.HelperTime.WithLabelValues(a.set.Site).Observe(time.Since(start).Seconds())
	if err != nil {
		a.metrics.HelperErrors.WithLabelValues(a.set.Site).Inc()
		return nil, NewError(ErrTypeHelper, err.Error(), err)
	}
	out.SealedKey = nil // the worker's to make: a helper's own could be another host's copy
	if out.Key != "" {
		if out.SealedKey, err = a.secrets.Seal(activity.GetInfo(ctx).WorkflowExecution.ID, out.Key); err != nil {
			return nil, NewError(ErrTypeConfig, err.Error(), err)
		}
		out.Key = ""
	}
	if out.Shutdown {
		a.metrics.ShutdownRequests.WithLabelValues(a.set.Site).Inc()
	}
	if !out.Defer && !out.Shutdown {
		if len(out.Configuration) == 0 {
			a.metrics.HelperErrors.WithLabelValues(a.set.Site).Inc()
			return nil, NewError(ErrTypeHelper, "helper returned no configuration and did not defer or shut down", nil)
		}
		cj, _ := json.Marshal(out.Configuration)
		if len(cj) > maxConfigurationJSON {
			return nil, NewError(ErrTypeConfig, fmt.Sprintf("helper configuration is %d bytes of JSON; the configure action accepts at most %d", len(cj), maxConfigurationJSON), nil)
		}
	}
	return out, nil
}
