package activities

import (
	"context"
	"encoding/json"

	"go.temporal.io/sdk/activity"
)

// StepConfigure is the step as status, search attributes and logs name it; ConfigureName its activity.
const StepConfigure, ConfigureName = "configure", "Configure"

// Configure sends the configuration with choria_provision#configure.
func (a *Activities) Configure(ctx context.Context, in ConfigureInput) (*MessageResult, error) {
	cj, err := json.Marshal(in.Configuration)
	if err != nil {
		return nil, NewError(ErrTypeConfig, err.Error(), err)
	}
	var key, keyECDH string
	plain := in.Key
	if in.SealedKey != nil {
		if plain, err = a.secrets.Open(activity.GetInfo(ctx).WorkflowExecution.ID, in.SealedKey); err != nil {
			return nil, NewError(ErrTypeConfig, err.Error(), err)
		}
	}
	if plain != "" {
		// a fresh provisioner ECDH pair per attempt: the server's half changes with every jwt call
		if key, keyECDH, err = EncryptKeyForServer(plain, in.ECDHPublic); err != nil {
			return nil, NewError(ErrTypeConfig, err.Error(), err)
		}
	}
	args := map[string]any{"config": string(cj), "token": a.set.Token}
	if in.Certificate != "" {
		args["certificate"] = in.Certificate
	}
	if in.CA != "" {
		args["ca"] = in.CA
	}
	if in.SSLDir != "" {
		args["ssldir"] = in.SSLDir
	}
	if key != "" {
		args["key"], args["ecdh_public"] = key, keyECDH
	}
	if in.ServerJWT != "" {
		args["server_jwt"] = in.ServerJWT
	}
	if len(in.ActionPolicies) > 0 {
		args["action_policies"] = anyMap(in.ActionPolicies)
	}
	if len(in.OPAPolicies) > 0 {
		args["opa_policies"] = anyMap(in.OPAPolicies)
	}
	// a banned host gets nothing; the issuance is in the audit before the identity leaves
	if err := a.refuseBanned(ctx, in.Identity); err != nil {
		return nil, err
	}
	if err := a.appendIssuance(ctx, in); err != nil {
		return nil, err
	}
	r, err := a.provision(ctx, in.Identity, "configure", args)
	if err != nil {
		return nil, err
	}
	return message(r), nil
}
