package activities

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/choria-temporal/provisioner/common/textsafe"
)

// DecodeHelperOutput parses a helper's stdout: exactly one JSON object. Its errors quote no
// byte of the output: a helper may print secrets (a private key in pki mode) and the error
// goes to history and logs; they say where the output went wrong instead.
func DecodeHelperOutput(raw []byte) (*HelperOutput, error) {
	out := bytes.TrimSpace(raw)
	if len(out) == 0 {
		return nil, ErrHelperEmpty
	}
	res := &HelperOutput{}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(res); err != nil {
		return nil, fmt.Errorf("%w: %s (%d bytes of output)", ErrHelperDecode, whereJSONFailed(err, dec.InputOffset()), len(out))
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object at byte %d (%d bytes of output)", ErrHelperDecode, dec.InputOffset(), len(out))
	}
	return res, nil
}

// whereJSONFailed says what is wrong with JSON without quoting it: encoding/json's own messages
// quote the offending character or number.
func whereJSONFailed(err error, offset int64) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("not JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("a value of the wrong kind at byte %d (%s expected)", typ.Offset, typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	}
	return fmt.Sprintf("not the helper contract's object, near byte %d", offset)
}

// stderrNote is the start of the helper's stderr for an error: what a helper says about its
// failure, bounded and cleaned of control characters (it reaches history, logs and terminals).
func stderrNote(c *capped) string {
	s := strings.TrimSpace(c.buf.String())
	if s == "" {
		return ""
	}
	return "; stderr: " + textsafe.Clean(s, helperStderrNote)
}

// capped keeps the first limit bytes and drops the rest, remembering that it did. With stop it
// fails the write instead, which closes the pipe so a runaway helper dies of SIGPIPE at once.
type capped struct {
	buf      bytes.Buffer
	limit    int
	stop     bool
	overflow bool
}

var errOverflow = errors.New("output limit reached")

func (c *capped) Write(p []byte) (int, error) {
	room := c.limit - c.buf.Len()
	if len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		c.overflow = true
		if c.stop {
			return max(room, 0), errOverflow
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

var _ io.Writer = (*capped)(nil)
