package style

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxFuncLines bounds a function of product code: one that grows past it does more than one
// thing, and reads better as the steps it takes.
const maxFuncLines = 60

// maxDiscoveryFileLines bounds a file of discovery/, one concern each (intake, sweep, judge, start).
const maxDiscoveryFileLines = 250

// product says whether a repository path is product code: what the product binary links, not
// the dev scaffolding, the tests or the test-only packages.
func product(path string) bool {
	if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
		return false
	}
	for _, skip := range []string{"internal/dev/", "internal/integration/", "internal/testpki/", "internal/testnet/", "cmd/choria-provisioner-dev/", "tools/", "docs/"} {
		if strings.HasPrefix(path, skip) {
			return false
		}
	}
	return true
}

func productFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && product(filepath.ToSlash(rel)) {
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

func TestNoProductFunctionIsLong(t *testing.T) {
	fs := token.NewFileSet()
	for _, rel := range productFiles(t) {
		f, err := parser.ParseFile(fs, filepath.Join("../..", rel), nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1
				if n > maxFuncLines {
					t.Errorf("%s: %s is %d lines, the bound is %d: split it into its steps", rel, fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
}

func TestDiscoveryFilesAreOneConcernEach(t *testing.T) {
	files, err := filepath.Glob("../../discovery/*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if n := strings.Count(string(b), "\n"); n > maxDiscoveryFileLines {
			t.Errorf("%s: %d lines, the bound is %d", f, n, maxDiscoveryFileLines)
		}
	}
}

// The checks bite: a long function is found.
func TestTheCheckFindsALongFunction(t *testing.T) {
	src := "package x\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", maxFuncLines) + "}\n"
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "x.go", src, 0)
	require.NoError(t, err)
	fd := f.Decls[0].(*ast.FuncDecl)
	require.Greater(t, fs.Position(fd.End()).Line-fs.Position(fd.Pos()).Line+1, maxFuncLines)
	require.True(t, product("workflows/provision.go"))
	require.False(t, product("internal/dev/bench/bench.go"))
	require.False(t, product("workflows/provision_test.go"))
}
