package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// What a document may name, and how the names are recognised. Only shapes that are this
// repository's by construction are checked: a Go file name anywhere in the text (prose, code
// spans, code blocks); and in code spans `name()`, `pkg.Name` or `Type.Member` whose qualifier is
// a package or type declared here, a test's name, an `ErrXxx`, and a bare lowerCamel name (the
// shape of an unexported Go identifier). Other projects' names written bare in one of those
// shapes are listed in foreignNames.
var (
	goFile        = regexp.MustCompile(`[\w./<>*{}-]*[\w>*}]\.go\b`)
	urlish        = regexp.MustCompile(`\w+://\S+`)
	moduleVersion = regexp.MustCompile(`^\s+v\d`)
	callName      = regexp.MustCompile(`^([A-Za-z_]\w*)\(\)$`)
	qualified     = regexp.MustCompile(`^([A-Za-z_]\w*)\.([A-Za-z_]\w*)(\(\))?$`)
	testName      = regexp.MustCompile(`^(Test|Fuzz|Benchmark)[A-Z0-9_]\w*$`)
	errName       = regexp.MustCompile(`^Err[A-Z]\w*$`)
	lowerCamel    = regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z]\w*$`)
)

// foreignNames are other projects' names that the documents write bare, in a shape the check
// would otherwise take for one of ours.
var foreignNames = map[string]string{
	"clientAuth":              "x509 extended key usage",
	"clientCaFiles":           "Temporal server configuration",
	"rootCaFiles":             "Temporal server configuration",
	"httpPort":                "Temporal server configuration",
	"maxConns":                "Temporal server configuration",
	"isCommandMatchEvent":     "Temporal Go SDK",
	"TestWorkflowEnvironment": "Temporal Go SDK (testsuite)",
	"hostPath":                "Kubernetes volume type",
	"subPath":                 "Kubernetes volume mount field",
}

// goNames is what the repository declares.
type goNames struct {
	paths   map[string]bool            // every file, slash-separated, relative to the root
	bases   map[string]bool            // every file's base name
	pkgs    map[string]map[string]bool // package name: its top-level names
	members map[string]map[string]bool // type name: its methods and fields
	funcs   map[string]bool            // functions and methods
	decls   map[string]bool            // every declared name, fields and methods included
	words   map[string]bool            // the keys and names of the repository's YAML, JSON and templates (a chart's values)
}

func (n *goNames) member(m map[string]map[string]bool, owner, name string) {
	if m[owner] == nil {
		m[owner] = map[string]bool{}
	}
	m[owner][name] = true
	n.decls[name] = true
}

// receiver is the name of a method's receiver type: T of T, *T, T[K] or *T[K].
func receiver(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func (n *goNames) addType(pkg string, ts *ast.TypeSpec) {
	n.member(n.pkgs, pkg, ts.Name.Name)
	var fields []*ast.Field
	switch tt := ts.Type.(type) {
	case *ast.StructType:
		fields = tt.Fields.List
	case *ast.InterfaceType:
		fields = tt.Methods.List
	}
	for _, f := range fields {
		for _, id := range f.Names {
			n.member(n.members, ts.Name.Name, id.Name)
		}
		if len(f.Names) == 0 { // embedded: its type's name is the field's
			if name := receiver(f.Type); name != "" {
				n.member(n.members, ts.Name.Name, name)
			} else if sel, ok := f.Type.(*ast.SelectorExpr); ok {
				n.member(n.members, ts.Name.Name, sel.Sel.Name)
			}
		}
	}
}

func (n *goNames) addFile(f *ast.File) {
	pkg := strings.TrimSuffix(f.Name.Name, "_test")
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			n.funcs[d.Name.Name] = true
			if d.Recv != nil && len(d.Recv.List) > 0 {
				n.member(n.members, receiver(d.Recv.List[0].Type), d.Name.Name)
			} else {
				n.member(n.pkgs, pkg, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					n.addType(pkg, s)
				case *ast.ValueSpec:
					for _, id := range s.Names {
						n.member(n.pkgs, pkg, id.Name)
					}
				}
			}
		}
	}
}

func declaredNames(t *testing.T, root string) *goNames {
	n := &goNames{paths: map[string]bool{}, bases: map[string]bool{}, pkgs: map[string]map[string]bool{},
		members: map[string]map[string]bool{}, funcs: map[string]bool{}, decls: map[string]bool{}, words: map[string]bool{}}
	fset := token.NewFileSet()
	for _, p := range repoFiles(t, root, "") {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		n.paths[filepath.ToSlash(rel)] = true
		n.bases[filepath.Base(p)] = true
		if isConfigFile(p) && !strings.Contains(filepath.ToSlash(rel), "testdata/") {
			n.addWords(t, p)
		}
		if !strings.HasSuffix(p, ".go") || strings.Contains(filepath.ToSlash(rel), "testdata/") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		n.addFile(f)
	}
	if len(n.funcs) < 100 {
		t.Fatalf("found only %d functions under %s", len(n.funcs), root)
	}
	return n
}

// fileExists: a path from the repository's root (or its tail, `devstack/temporal.go`), or a
// bare name that some file of the repository has.
func (n *goNames) fileExists(name string) bool {
	name = strings.TrimPrefix(name, "./")
	if !strings.Contains(name, "/") {
		return n.bases[name]
	}
	if n.paths[name] {
		return true
	}
	for p := range n.paths {
		if strings.HasSuffix(p, "/"+name) {
			return true
		}
	}
	return false
}

// missingFiles are the Go file names in a document's text that no file of the repository has;
// seen counts the names checked.
func (n *goNames) missingFiles(text string) (out []string, seen int) {
	text = urlish.ReplaceAllString(text, "")
	for _, at := range goFile.FindAllStringIndex(text, -1) {
		m := text[at[0]:at[1]]
		// a pattern (`activities/<step>_step.go`, `*_test.go`), another module's path, or a
		// module named with its version (nats.go v1.55.0)
		if strings.ContainsAny(m, "<>*{}") || strings.Contains(strings.SplitN(m, "/", 2)[0], ".") && strings.Contains(m, "/") ||
			moduleVersion.MatchString(text[at[1]:]) {
			continue
		}
		seen++
		if !n.fileExists(m) {
			out = append(out, m)
		}
	}
	return out, seen
}

// known says whether a code span names something the repository declares; checked is false
// for a span that is not in one of the shapes this test checks.
func (n *goNames) known(span string) (ok, checked bool) {
	if _, foreign := foreignNames[span]; foreign {
		return true, true
	}
	if m := callName.FindStringSubmatch(span); m != nil {
		return n.funcs[m[1]], true
	}
	if m := qualified.FindStringSubmatch(span); m != nil && m[2] != "go" {
		// `pkg.Name` lower case, `Type.Member` upper case (`provisioner.pprof` is a file)
		if names, isPkg := n.pkgs[m[1]]; isPkg && !ast.IsExported(m[1]) {
			return names[m[2]], true
		}
		if names, isType := n.members[m[1]]; isType && ast.IsExported(m[1]) {
			return names[m[2]], true
		}
		return false, false
	}
	switch {
	case testName.MatchString(span):
		return n.funcs[span], true
	case errName.MatchString(span), lowerCamel.MatchString(span):
		return n.decls[span], true
	}
	return false, false
}

// Every Go file a document names exists, and so does every function, method, field, test and
// unexported name it writes in a code span in a shape of this repository's.
func TestEveryDocNameExists(t *testing.T) {
	root := ".."
	names := declaredNames(t, root)
	files, fileNames, checked := 0, 0, 0
	for _, f := range markdownFiles(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		missing, seen := names.missingFiles(string(b))
		for _, m := range missing {
			t.Errorf("%s: no file %s in the repository", f, m)
		}
		fileNames += seen
		files++
		for _, span := range inline.FindAllString(fence.ReplaceAllString(string(b), ""), -1) {
			span = strings.TrimSpace(strings.Trim(span, "`"))
			ok, isName := names.known(span)
			if !isName {
				continue
			}
			checked++
			if !ok && !names.inConfig(span) { // a chart's values key is declared in its YAML
				t.Errorf("%s: `%s` is declared nowhere in the repository", f, span)
			}
		}
	}
	t.Logf("%d Go file names and %d Go names in %d documents exist", fileNames, checked, files)
}

// The shapes the check takes for this repository's names, and the ones it leaves alone.
func TestDocNameShapes(t *testing.T) {
	names := declaredNames(t, "..")
	for span, want := range map[string][2]bool{ // ok, checked
		"TestEveryDocNameExists":  {true, true},
		"TestNoSuchTestAnywhere":  {false, true},
		"declaredNames()":         {true, true},
		"noSuchFunction()":        {false, true},
		"goNames.fileExists":      {false, false}, // an unexported type: not a shape the docs use
		"docs.TestDocNameShapes":  {true, true},
		"docs.NoSuchName":         {false, true},
		"repoFiles":               {true, true},
		"repoFilez":               {false, true},
		"ctx.Done()":              {false, false},
		"temporal.fast_mode":      {false, false},
		"provisioner.pprof":       {false, false},
		"maxConns":                {true, true},
		"ProvisionStep":           {false, false},
		"system.enableActivityEa": {false, false},
	} {
		ok, checked := names.known(span)
		if ok != want[0] || checked != want[1] {
			t.Errorf("%s: known %v, checked %v; want %v, %v", span, ok, checked, want[0], want[1])
		}
	}
	missing, _ := names.missingFiles("see docs/names_test.go, `links_test.go`, docs/nope.go, " +
		"activities/<step>_step.go, https://example.com/x/y.go, github.com/choria-io/go-choria/x.go and nats.go v1.55.0")
	if strings.Join(missing, " ") != "docs/nope.go" {
		t.Errorf("missing files %q, want only docs/nope.go", missing)
	}
}

func isConfigFile(p string) bool {
	for _, ext := range []string{".yaml", ".yml", ".tpl", ".json"} {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

var configWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// addWords records the words of a configuration file: a doc may name a chart's values key.
func (n *goNames) addWords(t *testing.T, p string) {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range configWord.FindAllString(string(b), -1) {
		n.words[w] = true
	}
}

// inConfig: a span whose every dotted part is a word of the repository's configuration files
// (`service.type`, `topologySpreadConstraints`).
func (n *goNames) inConfig(span string) bool {
	for _, part := range strings.Split(span, ".") {
		if !n.words[part] {
			return false
		}
	}
	return span != ""
}
