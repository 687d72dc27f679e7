package activities

import (
	"context"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
)

// Gencsr asks the server for a key and CSR with its identity as common name (pki feature) and
// validates the CSR against the identity and cert_deny_list.
func (a *Activities) Gencsr(ctx context.Context, in HostInput) (*CSRResult, error) {
	r, err := callProvision(ctx, a, in.Identity, "gencsr", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.GencsrOutput, error) {
		return do[*cpc.GencsrResult, *cpc.GencsrOutput](ctx, pc.Gencsr(a.set.Token).Cn(in.Identity))
	})
	if err != nil {
		return nil, err
	}
	if err := ValidateCSR(r.Csr(), in.Identity, a.set.CertDenyList); err != nil {
		return nil, NewError(ErrTypeCSR, err.Error(), err)
	}
	return &CSRResult{CSR: r.Csr(), PublicKey: r.PublicKey(), SSLDir: r.Ssldir()}, nil
}
