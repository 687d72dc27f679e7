// Package docs holds the project's documentation; its tests check that every link between the
// documents resolves and that the files and Go names the documents mention exist.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink   = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	fence    = regexp.MustCompile("(?ms)^```.*?^```")
	inline   = regexp.MustCompile("`[^`\n]*`")
	notSlugs = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// slug is GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes.
func slug(h string) string {
	h = strings.ToLower(inline.ReplaceAllStringFunc(h, func(s string) string { return strings.Trim(s, "`") }))
	return strings.ReplaceAll(notSlugs.ReplaceAllString(h, ""), " ", "-")
}

func anchors(t *testing.T, file string) map[string]bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
		s := slug(m[1])
		for n := 1; out[s]; n++ { // GitHub numbers repeated headings
			s = slug(m[1]) + "-" + string(rune('0'+n))
		}
		out[s] = true
	}
	return out
}

// repoFiles walks the repository (hidden directories and node_modules left out) and returns the
// files whose names end with suffix.
func repoFiles(t *testing.T, root, suffix string) []string {
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, suffix) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// markdownFiles are the repository's Markdown files.
func markdownFiles(t *testing.T, root string) []string {
	files := repoFiles(t, root, ".md")
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s", len(files), root)
	}
	return files
}

// Every relative link in the repository's Markdown points at a file that exists and, with a
// fragment, at a heading of that file.
func TestEveryDocLinkResolves(t *testing.T) {
	root := ".."
	files := markdownFiles(t, root)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := inline.ReplaceAllString(fence.ReplaceAllString(string(b), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[frag] {
				t.Errorf("%s: link %q: no heading with that anchor in %s", f, target, dest)
			}
			checked++
		}
	}
	t.Logf("%d links in %d files resolve", checked, len(files))
}
