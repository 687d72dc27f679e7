package discovery

import (
	"encoding/json"
	"testing"

	"github.com/choria-io/go-choria/protocol"
	v1 "github.com/choria-io/go-choria/protocol/v1"
	v2 "github.com/choria-io/go-choria/protocol/v2"
	"github.com/stretchr/testify/require"
)

// A sweep reads only the sender of each reply; it must be the sender go-choria's own transport
// parser reads, in both protocol versions, and anything else is an error, not an identity.
func TestReplySenderIsGoChoriasSender(t *testing.T) {
	payload := []byte(`{"a secure reply":"of about a kilobyte"}`)
	v2t, err := json.Marshal(&v2.TransportMessage{Protocol: protocol.TransportV2, Data: payload,
		Headers: &v2.TransportHeaders{Sender: "n1.example", SeenBy: [][3]string{{"a", "b", "c"}}}})
	require.NoError(t, err)
	v1t, err := json.Marshal(&v1.TransportMessage{Protocol: protocol.TransportV1, Data: payload,
		Headers: &v1.TransportHeaders{MCollectiveSender: "n2.example", ReplyTo: "x"}})
	require.NoError(t, err)

	for _, tc := range []struct {
		data  []byte
		parse func([]byte) (protocol.TransportMessage, error)
		want  string
	}{{v2t, v2.NewTransportFromJSON, "n1.example"}, {v1t, v1.NewTransportFromJSON, "n2.example"}} {
		got, err := replySender(tc.data)
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		theirs, err := tc.parse(tc.data)
		require.NoError(t, err)
		require.Equal(t, theirs.SenderID(), got)
	}

	for _, bad := range []string{`not json`, `{"protocol":"something:else","headers":{"sender":"n1"}}`, `{}`} {
		_, err := replySender([]byte(bad))
		require.Error(t, err, bad)
	}
}
