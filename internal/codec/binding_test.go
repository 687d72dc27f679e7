package codec

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// bound is dc as the SDK hands it over for a workflow's payloads.
func bound(dc converter.DataConverter, workflowID string) converter.DataConverter {
	return converter.WithDataConverterSerializationContext(dc, converter.WorkflowSerializationContext{Namespace: "default", WorkflowID: workflowID})
}

// forActivity is dc as the SDK hands it over for an activity of workflowID.
func forActivity(dc converter.DataConverter, workflowID string) converter.DataConverter {
	return converter.WithDataConverterSerializationContext(dc, converter.ActivitySerializationContext{
		Namespace: "default", WorkflowID: workflowID, WorkflowType: "ProvisionHost", ActivityType: "SignServerJWT", TaskQueue: "q"})
}

type refusals []*RefusedError

func (r *refusals) add(e *RefusedError) { *r = append(*r, e) }

func newWorker(t *testing.T) (*Codec, *Codec, *refusals) {
	t.Helper()
	c, err := New(NewKey())
	require.NoError(t, err)
	var seen refusals
	return c, c.Worker(seen.add), &seen
}

func TestBindingRoundTrip(t *testing.T) {
	ops, worker, seen := newWorker(t)
	dc := DataConverter(worker)
	// written in the workflow, read by its activity: both name the same workflow
	p, err := bound(dc, "provision:a.example").ToPayload("for a")
	require.NoError(t, err)
	require.Equal(t, "provision:a.example", string(p.Metadata[MetadataBinding]))
	var s string
	require.NoError(t, forActivity(dc, "provision:a.example").FromPayload(p, &s))
	require.Equal(t, "for a", s)
	// with no workflow named, the worker reads any payload of its key
	require.NoError(t, dc.FromPayload(p, &s))
	// operators read it whatever it is bound to
	require.NoError(t, bound(DataConverter(ops), "provision:other").FromPayload(p, &s))
	require.Empty(t, *seen)
}

func TestForeignBindingIsRefused(t *testing.T) {
	_, worker, seen := newWorker(t)
	dc := DataConverter(worker)
	p, err := bound(dc, "provision:a.example").ToPayload("for a")
	require.NoError(t, err)
	var s string
	err = forActivity(dc, "provision:b.example").FromPayload(p, &s)
	require.ErrorIs(t, err, ErrRefused)
	var r *RefusedError
	require.True(t, errors.As(err, &r))
	require.Equal(t, ReasonForeignBinding, r.Reason)
	require.Equal(t, "provision:b.example", r.WorkflowID)
	require.Equal(t, "provision:a.example", r.Binding)
	require.Contains(t, err.Error(), `written for workflow "provision:a.example"`)
	require.Len(t, *seen, 1, "the refusal is reported once")
	require.Empty(t, s)
}

// The binding is authenticated: relabelling a payload for another workflow breaks it.
func TestTamperedBindingIsRefused(t *testing.T) {
	ops, worker, seen := newWorker(t)
	p, err := bound(DataConverter(worker), "provision:a.example").ToPayload("for a")
	require.NoError(t, err)
	p.Metadata[MetadataBinding] = []byte("provision:b.example")
	var s string
	err = bound(DataConverter(worker), "provision:b.example").FromPayload(p, &s)
	var r *RefusedError
	require.True(t, errors.As(err, &r), "%v", err)
	require.Equal(t, ReasonUndecryptable, r.Reason)
	require.Error(t, DataConverter(ops).FromPayload(p, &s), "operators cannot open it either")
	// nor can the label be removed, to pass it off as unbound
	delete(p.Metadata, MetadataBinding)
	require.Error(t, DataConverter(ops).FromPayload(p, &s))
	require.Len(t, *seen, 1)
}

func TestWorkerRefusesPlaintextOperatorsSeeIt(t *testing.T) {
	ops, worker, seen := newWorker(t)
	plain, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"identity": "intruder.example"})
	require.NoError(t, err)
	var v map[string]string
	for name, dc := range map[string]converter.DataConverter{
		"bound":   forActivity(DataConverter(worker), "provision:intruder.example"),
		"unbound": DataConverter(worker),
	} {
		err := dc.FromPayload(plain, &v)
		var r *RefusedError
		require.True(t, errors.As(err, &r), name)
		require.Equal(t, ReasonPlaintext, r.Reason, name)
	}
	require.Len(t, *seen, 2)
	require.NoError(t, bound(DataConverter(ops), "provision:intruder.example").FromPayload(plain, &v))
	require.Equal(t, "intruder.example", v["identity"])
}

func TestWorkerRefusesOtherKeys(t *testing.T) {
	_, worker, seen := newWorker(t)
	stranger, err := New(NewKey())
	require.NoError(t, err)
	p, err := bound(DataConverter(stranger), "provision:a.example").ToPayload("x")
	require.NoError(t, err)
	var s string
	err = bound(DataConverter(worker), "provision:a.example").FromPayload(p, &s)
	var r *RefusedError
	require.True(t, errors.As(err, &r))
	require.Equal(t, ReasonUnknownKey, r.Reason)
	require.Len(t, *seen, 1)
}

// A payload of the format before binding (associated data: the key ID alone) is read by
// operators and where the SDK names no workflow, and refused where it does.
func TestUnboundPayloadsRefusedWhereTheWorkflowIsKnown(t *testing.T) {
	ops, worker, seen := newWorker(t)
	plain, err := converter.GetDefaultDataConverter().ToPayload("old")
	require.NoError(t, err)
	legacy := sealUnbound(t, ops, plain)
	var s string
	require.NoError(t, DataConverter(ops).FromPayload(legacy, &s))
	require.Equal(t, "old", s)
	require.NoError(t, DataConverter(worker).FromPayload(legacy, &s))
	err = bound(DataConverter(worker), "provision:a.example").FromPayload(legacy, &s)
	var r *RefusedError
	require.True(t, errors.As(err, &r))
	require.Equal(t, ReasonUnbound, r.Reason)

	// so is one written where the SDK named no workflow
	p, err := DataConverter(worker).ToPayload("no workflow")
	require.NoError(t, err)
	err = bound(DataConverter(worker), "provision:a.example").FromPayload(p, &s)
	require.True(t, errors.As(err, &r))
	require.Equal(t, ReasonUnbound, r.Reason)
	require.Len(t, *seen, 2)
}

// sealUnbound writes p as the codec did before payloads were bound.
func sealUnbound(t *testing.T, c *Codec, p *commonpb.Payload) *commonpb.Payload {
	t.Helper()
	aead := c.aeads[c.activeID]
	b, err := proto.Marshal(p)
	require.NoError(t, err)
	nonce := make([]byte, aead.NonceSize())
	return &commonpb.Payload{Metadata: map[string][]byte{MetadataEncoding: []byte(EncodingName), MetadataKeyID: []byte(c.activeID)},
		Data: aead.Seal(nonce, nonce, b, []byte(c.activeID))}
}

func TestFailuresAreEncryptedAndBound(t *testing.T) {
	ops, worker, seen := newWorker(t)
	fc := converter.WithFailureConverterSerializationContext(FailureConverter(DataConverter(worker)),
		converter.ActivitySerializationContext{WorkflowID: "provision:a.example"})
	f := fc.ErrorToFailure(temporal.NewApplicationError("helper exited 1; stderr: -----BEGIN PRIVATE KEY-----", "HelperError"))
	require.Equal(t, "Encoded failure", f.GetMessage())
	raw, err := proto.Marshal(f)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "PRIVATE KEY")
	require.Equal(t, "provision:a.example", string(f.GetEncodedAttributes().GetMetadata()[MetadataBinding]))

	// the workflow reads its activity's failure; operators read it too
	back := converter.WithFailureConverterSerializationContext(FailureConverter(DataConverter(worker)),
		converter.WorkflowSerializationContext{WorkflowID: "provision:a.example"}).FailureToError(proto.Clone(f).(*failurepb.Failure))
	require.Contains(t, back.Error(), "PRIVATE KEY")
	require.Contains(t, FailureConverter(DataConverter(ops)).FailureToError(proto.Clone(f).(*failurepb.Failure)).Error(), "-----BEGIN")
	// another workflow's worker does not
	other := converter.WithFailureConverterSerializationContext(FailureConverter(DataConverter(worker)),
		converter.WorkflowSerializationContext{WorkflowID: "provision:b.example"}).FailureToError(proto.Clone(f).(*failurepb.Failure))
	require.NotContains(t, other.Error(), "PRIVATE KEY")
	require.Len(t, *seen, 1)
}

// A task whose payload was refused fails for good, with the reason.
func TestRefusalIsANonRetryableFailure(t *testing.T) {
	refused := &RefusedError{Reason: ReasonPlaintext, WorkflowID: "evil"}
	f := FailureConverter(converter.GetDefaultDataConverter()).ErrorToFailure(
		fmt.Errorf("unable to decode the activity function input payload with error: %w for function name: SignServerJWT", refused))
	err := FailureConverter(converter.GetDefaultDataConverter()).FailureToError(f)
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app))
	require.Equal(t, ErrTypeRefused, app.Type())
	require.True(t, app.NonRetryable())
	require.Contains(t, app.Error(), "not encrypted with the provisioner's codec key")
}
