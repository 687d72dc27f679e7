package service

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/choria-io/tokens"
	"go.uber.org/zap"
)

// SignerRefresh is how often the signer token's expiry is read again. The signing step reads
// jwt_signing_token per signature, so a renewed token takes effect without a restart; the gauge
// follows it within this period.
const SignerRefresh = time.Minute

// SignerExpiry reads jwt_signing_token, unverified as the signing step reads it, and returns
// when it expires: the zero time for a token that never does.
func SignerExpiry(file string) (time.Time, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading jwt_signing_token: %w", err)
	}
	t, err := tokens.ParseClientIDTokenUnverified(strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}, fmt.Errorf("parsing jwt_signing_token %s: %w", file, err)
	}
	return t.ExpireTime(), nil
}

// watchSigner keeps choria_provisioner_signer_expiry_timestamp_seconds at jwt_signing_token's
// expiry until ctx ends, so that an alert can say weeks ahead that no host will be provisioned
// once it passes. Without a jwt_signing_token there is nothing to watch.
func (s *Service) watchSigner(ctx context.Context, every time.Duration) {
	if s.cfg.JWTSigningToken == "" {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := ""
	for {
		last = s.refreshSigner(last)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshSigner sets the gauge from the token once. A token that cannot be read removes the
// series (the hosts-failing alert covers the signing failures it causes) and is logged when the
// reason differs from the last one, lastErr, not once a minute; it returns the reason now.
func (s *Service) refreshSigner(lastErr string) string {
	exp, err := SignerExpiry(s.cfg.JWTSigningToken)
	if err != nil {
		s.Metrics.SetSignerExpiry(time.Time{})
		if err.Error() != lastErr {
			s.log.Warn("signer expiry not exported", zap.String("jwt_signing_token", s.cfg.JWTSigningToken), zap.Error(err))
		}
		return err.Error()
	}
	s.Metrics.SetSignerExpiry(exp)
	return ""
}
