package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProvisionInput starts a host's workflow. It names the host and the sighting, and nothing
// else: whatever bears on trust or on the run's shape is the worker's Policy. An input with any
// other field is refused (ErrForeignInput), so that a client of the namespace cannot ask a run
// for something the configuration did not.
type ProvisionInput struct {
	Identity string `json:"identity"`
	Source   string `json:"source"`
	// SeenAt is when the sighting that started this run was made (zero from operators): the
	// first reads use it to recognise a stale sighting of a host provisioned since.
	SeenAt time.Time `json:"seen_at,omitzero"`
	// Defers already spent by earlier runs of a continued-as-new workflow.
	Defers int `json:"defers,omitempty"`
}

// ErrForeignInput is the refusal of a run's input that is not what a starter of ours writes.
var ErrForeignInput = errors.New("refused input")

// UnmarshalJSON decodes strictly: an unknown field is an error, which fails the run before
// its first step.
func (in *ProvisionInput) UnmarshalJSON(b []byte) error {
	type plain ProvisionInput // without this method
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("%w: %v: a run's input names the host and the sighting only", ErrForeignInput, err)
	}
	*in = ProvisionInput(p)
	return nil
}
