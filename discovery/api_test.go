package discovery

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/choria-io/go-choria/lifecycle"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/workflows"
)

func TestParseStartupEvent(t *testing.T) {
	id, err := ParseStartupEvent(startupEvent(t, "n1.example", "provision_mode_server"), "provision_mode_server")
	require.NoError(t, err)
	require.Equal(t, "n1.example", id)
}

func TestHostileEventsAreRejected(t *testing.T) {
	shutdown, err := lifecycle.New(lifecycle.Shutdown, lifecycle.Identity("n1"), lifecycle.Component("provision_mode_server"))
	require.NoError(t, err)
	shutdownJSON, _ := json.Marshal(shutdown)
	cases := map[string][]byte{
		"not json":        []byte("not json at all"),
		"empty":           {},
		"wrong type":      shutdownJSON,
		"wrong component": startupEvent(t, "n1", "server"),
		"empty identity":  startupEvent(t, "", "provision_mode_server"),
		"10kB identity":   startupEvent(t, strings.Repeat("a", 10<<10), "provision_mode_server"),
		"control chars":   startupEvent(t, "n1\x07\x1b[2J", "provision_mode_server"),
		"wildcard":        startupEvent(t, "n1.*", "provision_mode_server"),
		"full wildcard":   startupEvent(t, ">", "provision_mode_server"),
		"space":           startupEvent(t, "n1 n2", "provision_mode_server"),
		"huge":            append([]byte(`{"protocol":"io.choria.lifecycle.v1.startup","identity":"`), append([]byte(strings.Repeat("x", 1<<20)), []byte(`"}`)...)...),
		"json array":      []byte(`[1,2,3]`),
	}
	for name, data := range cases {
		_, err := ParseStartupEvent(data, "provision_mode_server")
		require.ErrorIs(t, err, ErrBadEvent, name)
	}
}

func FuzzParseStartupEvent(f *testing.F) {
	f.Add(startupEvent(f, "n1.example", "provision_mode_server"))
	f.Add([]byte(`{"protocol":"io.choria.lifecycle.v1.startup","identity":"x","component":"provision_mode_server"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := ParseStartupEvent(data, "provision_mode_server")
		if err == nil {
			require.NoError(t, workflows.ValidateIdentity(id))
		} else {
			require.ErrorIs(t, err, ErrBadEvent)
		}
	})
}
