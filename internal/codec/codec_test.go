package codec

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

func TestRoundTripAndNoPlaintext(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	dc := DataConverter(c)
	p, err := dc.ToPayload(map[string]string{"server_jwt": "eyJhbGciOi.secret-token"})
	require.NoError(t, err)
	require.False(t, bytes.Contains(p.Data, []byte("secret-token")))
	require.Equal(t, EncodingName, string(p.Metadata[MetadataEncoding]))
	require.Equal(t, c.ActiveKeyID(), string(p.Metadata[MetadataKeyID]))

	var back map[string]string
	require.NoError(t, dc.FromPayload(p, &back))
	require.Equal(t, "eyJhbGciOi.secret-token", back["server_jwt"])
}

func TestRotationKeepsOldPayloadsReadable(t *testing.T) {
	oldKey, newKey := NewKey(), NewKey()
	old, err := New(oldKey)
	require.NoError(t, err)
	p, err := DataConverter(old).ToPayload("written with the old key")
	require.NoError(t, err)

	rotated, err := New(newKey, oldKey)
	require.NoError(t, err)
	var s string
	require.NoError(t, DataConverter(rotated).FromPayload(p, &s))
	require.Equal(t, "written with the old key", s)
	np, err := DataConverter(rotated).ToPayload("new")
	require.NoError(t, err)
	require.NotEqual(t, string(p.Metadata[MetadataKeyID]), string(np.Metadata[MetadataKeyID]))

	stranger, err := New(NewKey())
	require.NoError(t, err)
	_, err = stranger.Decode([]*commonpb.Payload{p})
	require.ErrorIs(t, err, ErrUnknownKey)
}

func TestTamperingIsDetected(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	p, err := DataConverter(c).ToPayload("x")
	require.NoError(t, err)
	p.Data[len(p.Data)-1] ^= 1
	_, err = c.Decode([]*commonpb.Payload{p})
	require.Error(t, err)
}

func TestPlainPayloadsPassThrough(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	plain, err := converter.GetDefaultDataConverter().ToPayload("plain")
	require.NoError(t, err)
	out, err := c.Decode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	require.Equal(t, plain, out[0])
}

func TestBadKeys(t *testing.T) {
	_, err := New()
	require.Error(t, err)
	_, err = New("abcd")
	require.Error(t, err)
	_, err = New("zz" + NewKey()[2:])
	require.Error(t, err)
}
