package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The product binary links none of the development scaffolding: the dev stack, the simulator,
// the benchmark, the fault proxy (toxiproxy), the test-only packages and the SDK's test suite belong to
// choria-provisioner-dev and the tests.
func TestProductLinksNoScaffolding(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed only %d packages: %s", len(deps), out)
	}
	for _, p := range deps {
		if strings.Contains(p, "/internal/dev/") || strings.HasSuffix(p, "/internal/testpki") || strings.HasSuffix(p, "/internal/testnet") || p == "go.temporal.io/sdk/testsuite" || strings.HasPrefix(p, "github.com/Shopify/toxiproxy") {
			t.Errorf("choria-provisioner links %s", p)
		}
	}
}
