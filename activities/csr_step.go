package activities

import (
	"context"
)

// StepGencsr is the step as status, search attributes and logs name it; GencsrName its activity.
const StepGencsr, GencsrName = "gencsr", "Gencsr"

// Gencsr asks the server for a key and CSR with its identity as common name (pki feature) and
// validates the CSR against the identity and cert_deny_list.
func (a *Activities) Gencsr(ctx context.Context, in HostInput) (*CSRResult, error) {
	r, err := a.provision(ctx, in.Identity, "gencsr", map[string]any{"token": a.set.Token, "cn": in.Identity})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	out, err := outputs("choria_provision#gencsr", r, "csr", "public_key", "ssldir")
	if err != nil {
		return nil, err
	}
	if err := ValidateCSR(out[0], in.Identity, a.set.CertDenyList); err != nil {
		return nil, NewError(ErrTypeCSR, err.Error(), err)
	}
	return &CSRResult{CSR: out[0], PublicKey: out[1], SSLDir: out[2]}, nil
}
