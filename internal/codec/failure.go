package codec

import (
	"errors"

	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// FailureConverter encodes failures' message and stack trace as a payload of dc
// (EncodeCommonAttributes), so a failure's text is encrypted and bound like every other payload:
// the SDK binds it to the workflow it is written for, which the SDK's own default converter does
// not do. A refused payload becomes a non-retryable failure of type ErrTypeRefused, so a task
// that brought one is not tried again.
func FailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return &failureConverter{dc: dc, fc: temporal.NewDefaultFailureConverter(
		temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})}
}

type failureConverter struct {
	dc converter.DataConverter
	fc converter.FailureConverter
}

var _ converter.FailureConverterWithSerializationContext = (*failureConverter)(nil)

func (f *failureConverter) ErrorToFailure(err error) *failurepb.Failure {
	var refused *RefusedError
	var app *temporal.ApplicationError
	if errors.As(err, &refused) && !errors.As(err, &app) {
		err = temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefused, nil)
	}
	return f.fc.ErrorToFailure(err)
}

func (f *failureConverter) FailureToError(failure *failurepb.Failure) error {
	return f.fc.FailureToError(failure)
}

func (f *failureConverter) WithSerializationContext(sc converter.SerializationContext) converter.FailureConverter {
	return FailureConverter(converter.WithDataConverterSerializationContext(f.dc, sc))
}
