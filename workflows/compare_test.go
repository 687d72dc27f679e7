package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompareVersions(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"0.30.2", "0.30.2", 0},
		{"0.30.2", "0.30.10", -1},
		{"1.0", "1.0.1", -1},
		{"1.0a", "1.0", 1},
		{"1.0", "1.0a", -1},
		{"2.0", "10.0", -1},
		{"1.01", "1.1", 0},
		{"1.0.0-rc1", "1.0.0-rc2", -1},
		{"1.0_1", "1.0.1", 0},
		{"1.a", "1.1", -1},
		{"0.99.0", "0.29.4", 1},
	}
	for _, c := range cases {
		require.Equal(t, c.want, CompareVersions(c.a, c.b), "%s vs %s", c.a, c.b)
		require.Equal(t, -c.want, CompareVersions(c.b, c.a), "%s vs %s", c.b, c.a)
	}
}
