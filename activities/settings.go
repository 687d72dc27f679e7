package activities

import (
	"time"

	"github.com/choria-temporal/provisioner/config"
)

// Settings are the parts of the configuration the activities use.
type Settings struct {
	Site               string        // label of every metric
	Token              string        // provisioning token: stays in the worker, never in history
	RPCTimeout         time.Duration // rpc_timeout: how long a request waits for its reply
	JWTVerifyCert      string        // jwt_verify_cert
	CertDenyList       []string      // cert_deny_list
	UpgradesRepository string        // upgrades_repository
	HelperCommand      []string      // helper, split into its arguments
	HelperTimeout      time.Duration // helper_timeout
	HelperEnv          []string      // names of the variables the helper gets: config.HelperBaseEnv and helper_env
	JWTSigningKey      string        // jwt_signing_key
	JWTSigningToken    string        // jwt_signing_token
	ServerJWTValidity  time.Duration // server_jwt_validity
}

// SettingsFrom picks the activities' settings out of a loaded configuration.
func SettingsFrom(cfg *config.Config) Settings {
	return Settings{
		Site: cfg.Site, Token: cfg.Token, RPCTimeout: cfg.RPCTimeoutDuration,
		JWTVerifyCert: cfg.JWTVerifyCert, CertDenyList: cfg.CertDenyList, UpgradesRepository: cfg.UpgradesRepository,
		HelperCommand: cfg.HelperCommand, HelperTimeout: cfg.HelperTimeoutDuration,
		HelperEnv:     append(append([]string(nil), config.HelperBaseEnv...), cfg.HelperEnv...),
		JWTSigningKey: cfg.JWTSigningKey, JWTSigningToken: cfg.JWTSigningToken, ServerJWTValidity: cfg.ServerJWTValidityDuration,
	}
}
