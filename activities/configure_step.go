package activities

import (
	"context"
	"encoding/json"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
)

// Configure sends the configuration with choria_provision#configure.
func (a *Activities) Configure(ctx context.Context, in ConfigureInput) (*MessageResult, error) {
	cj, err := json.Marshal(in.Configuration)
	if err != nil {
		return nil, NewError(ErrTypeConfig, err.Error(), err)
	}
	var key, keyECDH string
	if in.Key != "" {
		// a fresh provisioner ECDH pair per attempt: the server's half changes with every jwt call
		if key, keyECDH, err = EncryptKeyForServer(in.Key, in.ECDHPublic); err != nil {
			return nil, NewError(ErrTypeConfig, err.Error(), err)
		}
	}
	r, err := callProvision(ctx, a, in.Identity, "configure", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.ConfigureOutput, error) {
		req := pc.Configure(string(cj)).Token(a.set.Token)
		if in.Certificate != "" {
			req = req.Certificate(in.Certificate)
		}
		if in.CA != "" {
			req = req.Ca(in.CA)
		}
		if in.SSLDir != "" {
			req = req.Ssldir(in.SSLDir)
		}
		if key != "" {
			req = req.Key(key).EcdhPublic(keyECDH)
		}
		if in.ServerJWT != "" {
			req = req.ServerJwt(in.ServerJWT)
		}
		if len(in.ActionPolicies) > 0 {
			req = req.ActionPolicies(anyMap(in.ActionPolicies))
		}
		if len(in.OPAPolicies) > 0 {
			req = req.OpaPolicies(anyMap(in.OPAPolicies))
		}
		return do[*cpc.ConfigureResult, *cpc.ConfigureOutput](ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Message: r.Message()}, nil
}
