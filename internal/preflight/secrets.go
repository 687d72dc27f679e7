package preflight

import (
	"fmt"

	"github.com/choria-temporal/provisioner/config"
)

// checkSecrets says what of the provisioner's secrets the helper can reach, and whether keys the
// helper makes can be kept from those who only view history.
func (r *runner) checkSecrets(cfg *config.Config) {
	if c := cfg.HelperCredential; c != nil {
		r.emit(Result{Name: "secrets", Status: OK, Detail: fmt.Sprintf("the helper runs as %s (uid %d): the key files, mode 0600 of the service's user, are out of its reach", c.User, c.UID)})
	} else {
		r.emit(Result{Name: "secrets", Status: Warn, Detail: "the helper runs as the service's own user and can read its key files (the codec key, the signing seed)",
			Fix: "set helper_user to a user of its own, and give the unit CAP_SETUID and CAP_SETGID (docs/configuration.md)"})
	}
	if cfg.Features.PKI && cfg.SecretsKeyFile == "" {
		r.emit(Result{Name: "secrets", Status: Warn, Detail: "pki mode without secrets_key_file: a host whose helper returns a private key fails at the helper step",
			Fix: "write a key only the workers read (openssl rand -hex 32 > /etc/choria-provisioner/secrets.key; chmod 600) and set secrets_key_file to it"})
	}
}
