package operator

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/choria-temporal/provisioner/internal/codec"
)

// Failure messages are encrypted in history: operators read them with the codec key, and are
// told what is missing without it.
func TestFailureReasonsAreDecrypted(t *testing.T) {
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	worker := converter.WithFailureConverterSerializationContext(codec.FailureConverter(codec.DataConverter(c.Worker(nil))),
		converter.WorkflowSerializationContext{WorkflowID: "provision:n1"})
	f := worker.ErrorToFailure(temporal.NewNonRetryableApplicationError("step helper: helper exited 1", "ProvisionFailed", nil))
	require.Equal(t, "Encoded failure", f.GetMessage())

	require.Equal(t, "step helper: helper exited 1", (&Operator{DC: codec.DataConverter(c)}).message(f))
	other, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	require.Contains(t, (&Operator{DC: codec.DataConverter(other)}).message(f), "needs the codec key")
	require.Equal(t, "Encoded failure", f.GetMessage(), "the event is left as it was")
	plain := temporal.GetDefaultFailureConverter().ErrorToFailure(temporal.NewApplicationError("timed out", ""))
	require.Equal(t, "timed out", (&Operator{DC: codec.DataConverter(c)}).message(plain))
}
