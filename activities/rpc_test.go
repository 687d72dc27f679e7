package activities

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	rpcclient "github.com/choria-io/go-choria/providers/agent/mcorpc/client"
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

// A host's status text reaches history, logs and terminals: bounded and clean, whatever it sends.
func TestHostileStatusMessages(t *testing.T) {
	a := &Activities{set: Settings{RPCTimeout: time.Second}}
	for name, msg := range map[string]string{
		"escape sequences": "\x1b[2J\x1b[H\x1b]0;pwned\x07Incorrect \x1b[31mtoken\x1b[0m\r\nroot# ",
		"1 MiB":            strings.Repeat("A\x1b[1m", 1<<20/5),
		"bidi and NUL":     "\u202eNUL\x00 DEL\x7f",
	} {
		r, err := newReply(agentDDLs{}, "choria_provision", "configure", "n1", &rpcclient.RPCReply{Statuscode: mcorpc.Aborted, Statusmsg: msg})
		require.NoError(t, err, name)
		require.LessOrEqual(t, len(r.StatusMessage()), MaxStatusMessageBytes+32, name)
		err = a.one("n1", "choria_provision#configure", []replyDetails{r})
		var app *temporal.ApplicationError
		require.True(t, errors.As(err, &app), name)
		require.Equal(t, ErrTypeAborted, app.Type(), name)
		require.LessOrEqual(t, len(app.Error()), MaxStatusMessageBytes+128, name)
		for _, c := range app.Error() {
			require.False(t, unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c), "%s: %q", name, app.Error())
		}
	}
	r, err := newReply(agentDDLs{}, "choria_provision", "configure", "n1", &rpcclient.RPCReply{Statuscode: mcorpc.Aborted, Statusmsg: "\x1b[31mIncorrect provision token supplied\x1b[0m"})
	require.NoError(t, err)
	require.Equal(t, "Incorrect provision token supplied", r.StatusMessage(), "the text itself is kept")

	err = a.one("n1", "choria_provision#configure", []replyDetails{reply{"n1\x1b]0;x\x07" + strings.Repeat("x", 1<<20), true, ""}})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "\x1b")
	require.Less(t, len(err.Error()), 1024, "the sender is bounded too")
}
