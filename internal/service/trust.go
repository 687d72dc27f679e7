package service

import (
	"context"
	"os"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/workflows"
)

// DataConverter returns the operators' payload converter of the config: encrypting unless
// plaintext, and reading every payload of its keys, whatever workflow it was written for, and
// those not encrypted (the codec server, the hosts commands). The worker reads with
// WorkerDataConverter.
func DataConverter(cfg *config.Config) (converter.DataConverter, *codec.Codec, error) {
	if cfg.Temporal.Plaintext {
		return converter.GetDefaultDataConverter(), nil, nil
	}
	var keys []string
	if env := os.Getenv(config.CodecKeyEnv); env != "" {
		keys = strings.Split(env, ",")
	} else {
		var err error
		if keys, err = codec.LoadKeyFile(cfg.Temporal.CodecKeyFile); err != nil {
			return nil, nil, err
		}
	}
	c, err := codec.New(keys...)
	if err != nil {
		return nil, nil, err
	}
	return codec.DataConverter(c), c, nil
}

// failureConverter encrypts failure messages and stack traces with dc's codec; with
// temporal.plaintext there is none, and failures stay as the SDK writes them.
func failureConverter(cfg *config.Config, dc converter.DataConverter) converter.FailureConverter {
	if cfg.Temporal.Plaintext {
		return nil
	}
	return codec.FailureConverter(dc)
}

// PlaintextWarning is what a worker with temporal.plaintext says at start.
const PlaintextWarning = "temporal.plaintext is set: payloads and failures are neither encrypted nor bound to their host's workflow, " +
	"so anyone who can read the namespace reads every signed JWT and helper configuration, and anyone who can write to it " +
	"can hand this worker inputs of their own: namespace write access is then the right to mint identities. For a dev stack only"

// refusalReasons are the reasons choria_provisioner_refused_payloads counts, exported at 0 from
// the start so that an alert on their rate has a series to watch.
var refusalReasons = []string{codec.ReasonPlaintext, codec.ReasonUnknownKey, codec.ReasonUndecryptable, codec.ReasonUnbound,
	codec.ReasonForeignBinding, activities.ReasonForeignWorkflow, activities.ReasonIdentityMismatch,
	activities.ReasonForeignRequest, activities.ReasonForeignResult, activities.ReasonUnsealedFailure}

// dialWorker dials the worker's client (discovery shares it): it reads only payloads of its
// own keys, written for the workflow at hand.
// polls, when set, watches the worker's polls for its health.
func (s *Service) dialWorker(ctx context.Context, mh client.MetricsHandler, polls *pollWatch) (client.Client, error) {
	dc, err := s.workerDataConverter()
	if err != nil {
		return nil, err
	}
	var dial []grpc.DialOption
	if polls != nil {
		dial = append(dial, grpc.WithChainUnaryInterceptor(polls.intercept))
	}
	return dialTemporal(ctx, s.cfg, s.log, mh, dc, dial...)
}

// workerDataConverter is the data converter of the worker's client: it refuses payloads that are
// not encrypted with the codec's keys, or that were written for another workflow than the one
// decoded for, and logs and counts each refusal. With temporal.plaintext nothing is refused
// (there is nothing to check) and the start says so.
func (s *Service) workerDataConverter() (converter.DataConverter, error) {
	for _, r := range refusalReasons {
		s.Metrics.RefusedPayloads.WithLabelValues(s.cfg.Site, r).Add(0)
	}
	if s.cfg.Temporal.Plaintext {
		s.log.Warn(PlaintextWarning)
		return converter.GetDefaultDataConverter(), nil
	}
	_, c, err := DataConverter(s.cfg)
	if err != nil {
		return nil, err
	}
	return codec.DataConverter(c.Worker(s.refused)), nil
}

// controlSignalConverter is the data converter workflows.ControlSignals opens pause and resume
// requests with: the worker's keys and binding rules, without its refusal callback, since the
// interceptor counts each refused signal once itself (not again when a run replays).
func (s *Service) controlSignalConverter() (converter.DataConverter, error) {
	for _, r := range workflows.SignalReasons() {
		s.Metrics.RefusedSignals.WithLabelValues(s.cfg.Site, r).Add(0)
	}
	if s.cfg.Temporal.Plaintext {
		return converter.GetDefaultDataConverter(), nil
	}
	_, c, err := DataConverter(s.cfg)
	if err != nil {
		return nil, err
	}
	return codec.DataConverter(c.Worker(nil)), nil
}

// refusedSignal counts every refused pause or resume signal and logs them summarised, as refused
// payloads: anyone who can signal can send them by the thousand.
func (s *Service) refusedSignal(r *workflows.RefusedSignalError) {
	s.Metrics.RefusedSignals.WithLabelValues(s.cfg.Site, r.Reason).Inc()
	s.refusals.Warn("signal_"+r.Reason, zap.String(logging.FieldWorkflowID, r.WorkflowID), zap.Error(r))
}

// refused counts every payload the codec refuses and logs them summarised: whoever can write to
// the namespace can send them at will.
func (s *Service) refused(r *codec.RefusedError) {
	s.Metrics.RefusedPayloads.WithLabelValues(s.cfg.Site, r.Reason).Inc()
	s.refusals.Warn(r.Reason, zap.String(logging.FieldWorkflowID, r.WorkflowID), zap.String(logging.FieldBinding, r.Binding), zap.Error(r))
}

// workflowHooks count and log what host runs refuse (results and failures not sealed for their
// request) and the runs that decide with a policy recorded under another configuration.
func (s *Service) workflowHooks() workflows.Hooks {
	return workflows.Hooks{
		Refused: func(reason, workflowID, detail string) {
			s.Metrics.RefusedPayloads.WithLabelValues(s.cfg.Site, reason).Inc()
			s.refusals.Warn(reason, zap.String(logging.FieldWorkflowID, workflowID), zap.String(logging.FieldDetail, detail))
		},
		PolicyDrift: func(workflowID, recorded, current string) {
			s.Metrics.PolicyDrift.WithLabelValues(s.cfg.Site).Inc()
			s.log.Warn("a run decides with the policy it recorded under another configuration", zap.String(logging.FieldWorkflowID, workflowID),
				zap.String(logging.FieldRecordedDigest, recorded), zap.String(logging.FieldWorkerDigest, current))
		},
	}
}
