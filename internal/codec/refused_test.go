package codec

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
)

// A payload the codec refuses and a task the activities refuse fail with one error type: the
// workflow and the alerts classify both by it. The activities spell it themselves (they import no
// codec), so this holds the two spellings together.
func TestRefusalsShareTheirErrorType(t *testing.T) {
	require.Equal(t, ErrTypeRefused, activities.ErrTypeRefused)
}
