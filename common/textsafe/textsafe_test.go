package textsafe

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestEscapeSequencesAndControlsAreRemoved(t *testing.T) {
	for in, want := range map[string]string{
		"plain text": "plain text",
		"\x1b[31mred\x1b[0m and \x1b[2J\x1b[Hcleared":              "red and cleared",
		"title\x1b]0;owned\x07 set":                                "title set",
		"link \x1b]8;;http://evil.example\x1b\\here\x1b]8;;\x1b\\": "link here",
		"bell\x07 backspace\x08\x08 nul\x00 del\x7f":               "bell backspace nul del",
		"two\nlines\r\tand tab":                                    "two lines  and tab",
		"c1 \u009b31m csi":                                         "c1 31m csi",
		"bidi \u202egnp.exe\u202c":                                 "bidi gnp.exe",
		"not utf-8 \xff\xfe":                                       "not utf-8 \ufffd\ufffd",
		"unfinished \x1b[31":                                       "unfinished ",
		"ESC alone \x1b":                                           "ESC alone ",
		"ESC c reset \x1bc done":                                   "ESC c reset  done",
		"Provisioning is not active: ünïcödé stays":                "Provisioning is not active: ünïcödé stays",
	} {
		require.Equal(t, want, Clean(in, 0), "%q", in)
	}
}

func TestBounded(t *testing.T) {
	huge := strings.Repeat("\x1b[31mA", 1<<20/6) + strings.Repeat("é", 1<<19)
	out := Clean(huge, 256)
	require.LessOrEqual(t, len(out), 256+len("... [2097148 bytes]"))
	require.True(t, strings.HasSuffix(out, "bytes]"), out)
	require.True(t, utf8.ValidString(out))
	require.NotContains(t, out, "\x1b")
	// a cut never splits a character
	out = Clean("a"+strings.Repeat("é", 300), 256)
	require.True(t, utf8.ValidString(out), out)
	require.Equal(t, 255, len(strings.SplitN(out, "...", 2)[0]))
	require.Equal(t, "short", Clean("short", 256))
}

func FuzzClean(f *testing.F) {
	f.Add("\x1b[31mred\x1b]0;t\x07\u202e\xff", 16)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = max%512 + 1
		if max < 1 {
			max = -max + 1
		}
		out := Clean(s, max)
		require.True(t, utf8.ValidString(out))
		body, _, _ := strings.Cut(out, "... [")
		require.LessOrEqual(t, len(body), max)
		for _, r := range out {
			require.False(t, unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r), "%q", out)
		}
	})
}
