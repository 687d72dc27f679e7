package activities

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/choria-io/tokens"
)

// claims are the server's claims as the Choria Provisioner makes them: go-choria's defaults,
// overridden by the helper's server_claims, each checked.
func (s *ServerJWTSigner) claims(in SignInput, now time.Time) (*tokens.ServerClaims, error) {
	pk, err := hex.DecodeString(in.PublicKey)
	if err != nil || len(pk) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: server public key %q is not a hex ed25519 key", ErrSigning, in.PublicKey)
	}
	org := "choria"
	validity := s.DefaultValidity
	collectives := []string{"mcollective"}
	var pubSubs []string
	var perms *tokens.ServerPermissions

	// go-choria defaults to the choria collective with protocol v2 security
	if in.Config["plugin.security.provider"] == "choria" {
		collectives = []string{"choria"}
	}
	if cc, ok := in.Config["collectives"]; ok && cc != "" {
		collectives = splitList(cc)
	}
	if c := in.Claims; c != nil {
		if c.OrganizationUnit != "" {
			org = c.OrganizationUnit
		}
		if c.ExpiresAt != nil && !c.ExpiresAt.IsZero() {
			validity = c.ExpiresAt.Time.Sub(now)
		}
		if len(c.Collectives) > 0 {
			collectives = c.Collectives
		}
		pubSubs = c.AdditionalPublishSubjects
		perms = c.Permissions
	}
	// as the Choria Provisioner: an expiry within the hour (or in the past) means "use the default"
	if validity <= time.Hour {
		validity = s.DefaultValidity
	}
	if err := checkClaims(collectives, org, pubSubs); err != nil {
		return nil, err
	}
	claims, err := tokens.NewServerClaims(in.Identity, collectives, org, perms, pubSubs, pk, "Choria Provisioner", validity)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSigning, err)
	}
	return claims, nil
}

// checkClaims refuses names the broker would not accept.
func checkClaims(collectives []string, org string, pubSubs []string) error {
	for _, c := range collectives {
		if c == "" || strings.ContainsAny(c, ".>* \t") {
			return fmt.Errorf("%w: server_claims collective %q is not a valid name", ErrSigning, c)
		}
	}
	if !nameRe.MatchString(org) {
		return fmt.Errorf("%w: server_claims ou %q is not a valid organization unit", ErrSigning, org)
	}
	for _, subj := range pubSubs {
		if subj == "" || strings.ContainsAny(subj, " \t\r\n") || subj == ">" || strings.HasPrefix(subj, ">") || strings.HasPrefix(subj, "*.>") {
			return fmt.Errorf("%w: server_claims pub_subjects entry %q is not an allowed subject", ErrSigning, subj)
		}
	}
	return nil
}

var nameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
