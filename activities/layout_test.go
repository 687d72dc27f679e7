package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A step's activity, or one piece of RPC plumbing, is a file a reader takes in at once
// (docs/architecture.md): a file growing past this is the sign to split it by concern.
const maxFileLines = 200

func TestNoFileOutgrowsAScreenfulOfConcerns(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.LessOrEqual(t, strings.Count(string(b), "\n"), maxFileLines, "%s: split it by concern", f)
	}
}
