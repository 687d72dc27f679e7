package codec

import (
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// benchValue is the size of a typical step input: a host's inventory and keys, ~2 KiB of JSON.
var benchValue = map[string]string{"identity": "host-0001.example.net", "inventory": strings.Repeat("facts ", 300), "public_key": strings.Repeat("ab", 32)}

// BenchmarkCodec is one payload encrypted and decrypted as the worker does it, bound to a host's
// workflow (the SDK binds the codec for every payload): by the codec alone, and through the data
// converter (JSON included).
func BenchmarkCodec(b *testing.B) {
	ops, err := New(NewKey())
	if err != nil {
		b.Fatal(err)
	}
	c := ops.Worker(nil)
	sc := converter.ActivitySerializationContext{WorkflowID: "provision:host-0001.example.net", WorkflowType: "ProvisionHost"}
	plain, err := converter.GetDefaultDataConverter().ToPayload(benchValue)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bc := c.WithSerializationContext(sc)
			enc, err := bc.Encode([]*commonpb.Payload{plain})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.WithSerializationContext(sc).Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("converter", func(b *testing.B) {
		root := DataConverter(c)
		b.ReportAllocs()
		for b.Loop() {
			dc := converter.WithDataConverterSerializationContext(root, sc)
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
