package activities

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

type reply struct {
	sender string
	ok     bool
	msg    string
}

func (r reply) Sender() string        { return r.sender }
func (r reply) OK() bool              { return r.ok }
func (r reply) StatusMessage() string { return r.msg }

func TestReplyClassification(t *testing.T) {
	a := &Activities{set: Settings{RPCTimeout: time.Second}}
	check := func(replies []replyDetails, wantType string, nonRetryable bool) {
		t.Helper()
		err := a.one("n1", "choria_provision#jwt", replies)
		if wantType == "" {
			require.NoError(t, err)
			return
		}
		var app *temporal.ApplicationError
		require.True(t, errors.As(err, &app), "%v", err)
		require.Equal(t, wantType, app.Type())
		require.Equal(t, nonRetryable, app.NonRetryable())
	}
	check([]replyDetails{reply{"n1", true, "OK"}}, "", false)
	check(nil, ErrTypeNoReply, false)
	check([]replyDetails{reply{"n1", true, ""}, reply{"n1", true, ""}}, ErrTypeBadReply, false)
	check([]replyDetails{reply{"impostor", true, ""}}, ErrTypeBadReply, false)
	check([]replyDetails{reply{"n1", false, "Could not obtain provisioning lock"}}, ErrTypeLocked, false)
	check([]replyDetails{reply{"n1", false, "Cannot reconfigure a server that is not in provisioning mode"}}, ErrTypeHostNotProvisioning, false) // its word alone: stale decides
	check([]replyDetails{reply{"n1", false, "Incorrect provision token supplied"}}, ErrTypeAborted, false)
}

func TestInventorySizeLimit(t *testing.T) {
	require.NoError(t, checkInventorySize(MaxInventoryBytes))
	require.ErrorIs(t, checkInventorySize(MaxInventoryBytes+1), ErrInventoryTooLarge)
}
