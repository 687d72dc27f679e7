package codec

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
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

func TestServerDecodesForAuthorisedCallersOnly(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, "s3cret-token", []string{"http://127.0.0.1:8233"}))
	defer srv.Close()

	enc, err := DataConverter(c).ToPayload("the signed server JWT")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)

	post := func(auth string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://127.0.0.1:8233")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	for _, bad := range []string{"", "Bearer wrong", "s3cret-token", "Basic s3cret-token"} {
		resp := post(bad)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, bad)
		resp.Body.Close()
	}
	resp := post("Bearer s3cret-token")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "http://127.0.0.1:8233", resp.Header.Get("Access-Control-Allow-Origin"))
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var decoded commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(out, &decoded))
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(decoded.Payloads[0], &s))
	require.Equal(t, "the signed server JWT", s)

	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
	req.Header.Set("Origin", "http://evil.example")
	pre, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	pre.Body.Close()
	require.Empty(t, pre.Header.Get("Access-Control-Allow-Origin"), "unknown origins get no CORS grant")
}
