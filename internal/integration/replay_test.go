package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// signedJWTField is a signed JWT in a JSON field of a payload.
var signedJWTField = regexp.MustCompile(`"(jwt|server_jwt)":"eyJ[^"]*"`)

// writeReplayHistory saves one host's history, payloads decrypted and signed JWTs replaced, as the
// fixture that workflows' replay test checks every future workflow change against. It runs only
// when WRITE_REPLAY_HISTORY names a directory; the file is NAME.json in it.
func (e *env) writeReplayHistory(name, identity string) {
	e.t.Helper()
	e.writeReplayHistoryOf(name, workflows.WorkflowID(identity))
}

// writeReplayHistoryOf saves the history of any workflow by its ID, as writeReplayHistory.
func (e *env) writeReplayHistoryOf(name, workflowID string) {
	dir := os.Getenv("WRITE_REPLAY_HISTORY")
	if dir == "" {
		return
	}
	out := filepath.Join(dir, name+".json")
	_, c, err := service.DataConverter(e.cfg)
	require.NoError(e.t, err)
	hist := &historypb.History{Events: e.historyOf(workflowID)}
	err = proxy.VisitPayloads(context.Background(), hist, proxy.VisitPayloadsOptions{
		Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
			dec, err := c.Decode(ps)
			if err != nil {
				return nil, err
			}
			for _, p := range dec {
				if bytes.HasPrefix(p.Data, []byte(`"eyJ`)) {
					p.Data = []byte(`"redacted-signed-jwt"`)
				}
				// the sign step's result and the configure input carry it in a field
				p.Data = signedJWTField.ReplaceAll(p.Data, []byte(`"$1":"redacted-signed-jwt"`))
			}
			return dec, nil
		},
		SkipSearchAttributes: true,
	})
	require.NoError(e.t, err)
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
	require.NoError(e.t, err)
	require.NoError(e.t, os.WriteFile(out, b, 0o644))
	e.t.Logf("wrote replay history of %s to %s", workflowID, out)
}
