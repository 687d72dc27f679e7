// Package textsafe makes text that others wrote (a host's RPC status message, a failure's reason)
// safe to put in workflow history, a log line or a terminal: bounded, valid UTF-8, and without
// control characters or terminal escape sequences, which could rewrite what an operator sees.
package textsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean returns s with escape sequences (CSI, OSC, and two-character ones) removed, every other
// control or bidirectional-override character removed, tabs and line breaks as spaces, invalid
// UTF-8 as U+FFFD, and at most max bytes of it (max <= 0: no bound); a cut text ends with a note
// of how long the original was.
func Clean(s string, max int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if max > 0 && b.Len() >= max {
			return cut(b.String(), max) + fmt.Sprintf("... [%d bytes]", len(s))
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0x1b:
			i += escapeLen(s[i:])
			continue
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	if max > 0 && b.Len() > max {
		return cut(b.String(), max) + fmt.Sprintf("... [%d bytes]", len(s))
	}
	return b.String()
}

// cut is s's first max bytes, without splitting a character.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}

// escapeLen is the length of the escape sequence at the start of s (which begins with ESC):
// CSI (ESC [ parameters, ended by a byte 0x40-0x7e), OSC, DCS, SOS, PM and APC strings (ended by
// BEL or ESC \), or ESC and one character.
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch s[1] {
	case '[':
		for i := 2; i < len(s); i++ {
			if s[i] >= 0x40 && s[i] <= 0x7e {
				return i + 1
			}
		}
		return len(s)
	case ']', 'P', 'X', '^', '_':
		for i := 2; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return len(s)
	}
	_, n := utf8.DecodeRuneInString(s[1:])
	return 1 + n
}
