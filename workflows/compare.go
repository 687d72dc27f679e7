package workflows

import (
	"strings"
	"unicode"
)

// CompareVersions compares two version strings the way rpm's rpmvercmp does: runs of digits
// compare numerically, runs of letters lexically, a digit run is newer than a letter run, and
// separators only split. It returns -1, 0 or 1.
func CompareVersions(a, b string) int {
	if a == b {
		return 0
	}
	for {
		a = strings.TrimLeftFunc(a, isSeparator)
		b = strings.TrimLeftFunc(b, isSeparator)
		if a == "" || b == "" {
			break
		}
		var sa, sb string
		numeric := unicode.IsDigit(rune(a[0]))
		if numeric {
			sa, a = splitRun(a, isDigit)
			sb, b = splitRun(b, isDigit)
		} else {
			sa, a = splitRun(a, isLetter)
			sb, b = splitRun(b, isLetter)
		}
		if sb == "" { // different kinds of run: the numeric one is newer
			if numeric {
				return 1
			}
			return -1
		}
		if numeric {
			sa, sb = strings.TrimLeft(sa, "0"), strings.TrimLeft(sb, "0")
			if len(sa) != len(sb) {
				return sign(len(sa) - len(sb))
			}
		}
		if c := strings.Compare(sa, sb); c != 0 {
			return c
		}
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	default:
		return 1
	}
}

func isDigit(r rune) bool     { return r >= '0' && r <= '9' }
func isLetter(r rune) bool    { return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') }
func isSeparator(r rune) bool { return !isDigit(r) && !isLetter(r) }

func splitRun(s string, in func(rune) bool) (string, string) {
	i := strings.IndexFunc(s, func(r rune) bool { return !in(r) })
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
