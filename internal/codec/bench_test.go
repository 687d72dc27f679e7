package codec

import (
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// benchValue is the size of a typical step input: a host's inventory and keys, ~2 KiB of JSON.
var benchValue = map[string]string{"identity": "host-0001.example.net", "inventory": strings.Repeat("facts ", 300), "public_key": strings.Repeat("ab", 32)}

// BenchmarkCodec is one payload encrypted and decrypted: by the codec alone, and through the
// data converter as the SDK calls it (JSON included).
func BenchmarkCodec(b *testing.B) {
	c, err := New(NewKey())
	if err != nil {
		b.Fatal(err)
	}
	plain, err := converter.GetDefaultDataConverter().ToPayload(benchValue)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			enc, err := c.Encode([]*commonpb.Payload{plain})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("converter", func(b *testing.B) {
		dc := DataConverter(c)
		b.ReportAllocs()
		for b.Loop() {
			p, err := dc.ToPayload(benchValue)
			if err != nil {
				b.Fatal(err)
			}
			var back map[string]string
			if err := dc.FromPayload(p, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
}
