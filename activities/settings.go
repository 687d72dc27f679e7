package activities

import (
	"regexp"
	"syscall"
	"time"
)

// Settings are what the activities take from the worker's configuration, in their own terms: the
// worker maps its configuration file onto them (internal/service), so that the file's layout, its
// defaults and its spellings stay the configuration's.
type Settings struct {
	Site               string        // label of every metric
	Token              string        // provisioning token: stays in the worker, never in history
	RPCTimeout         time.Duration // how long a request waits for its reply
	JWTVerifyCert      string        // file of the certificate that verifies a server's provisioning JWT
	CertDenyList       []*regexp.Regexp
	UpgradesRepository string              // where servers fetch upgrades from ("": no upgrades)
	HelperCommand      []string            // the helper and its arguments
	HelperTimeout      time.Duration       // how long the helper may run
	HelperEnv          []string            // names of the provisioner's environment variables the helper gets
	HelperCredential   *syscall.Credential // the user the helper runs as; nil: this process's
	JWTSigningKey      string              // file of the key that signs server JWTs
	JWTSigningToken    string              // or the token that signs them
	ServerJWTValidity  time.Duration       // how long a server JWT is valid when the helper does not say
}
