// Package activities holds every side effect of provisioning a host: Choria RPCs addressed to the
// one host, the site helper, JWT verification and signing. Each is a Temporal activity; the
// workflow decides the order and the retries.
package activities

import (
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
)

// The host workflow the activities work for: its registered name (workflows.WorkflowName) and
// the beginning of its workflow ID, followed by the host's identity (workflows.WorkflowID). A task
// scheduled by any other workflow, or for another host than its workflow's, is refused (admit).
const (
	HostWorkflowType     = "ProvisionHost"
	HostWorkflowIDPrefix = "provision:"
)

// ProvisionTokenNote stands where the provisioning token would be: the worker holds it.
const ProvisionTokenNote = "provisioning token redacted: the worker holds it"

// HostInput addresses one host.
type HostInput struct {
	Requested
	Identity string `json:"identity"`
	// SeenAt, set on a run's first RPC only, is when the sighting that started the run was made.
	// When the host does not answer, an earlier run that completed after it means the sighting
	// was stale (see RunHistory).
	SeenAt time.Time `json:"seen_at,omitzero"`
}

// JWTResult is the verified provisioning JWT. Claims.Token is always empty: the token is a secret
// the worker already holds, so it never enters workflow history.
type JWTResult struct {
	Attempted
	Claims     *tokens.ProvisioningClaims `json:"claims"`
	ECDHPublic string                     `json:"ecdh_public"`
	HadToken   bool                       `json:"had_token"`
}

// ED25519Result is what the helper gets as ed25519_pubkey; the signature was verified over a
// fresh nonce before it is returned.
type ED25519Result struct {
	Attempted
	PublicKey string `json:"public_key"`
	Directory string `json:"directory"`
	Signature string `json:"signature"`
}

// CSRResult is what the helper gets as csr (pki feature).
type CSRResult struct {
	Attempted
	CSR       string `json:"csr"`
	PublicKey string `json:"public_key"`
	SSLDir    string `json:"ssldir"`
}

// InventoryResult is the rpcutil#inventory reply, kept as the JSON text the helper contract wants.
type InventoryResult struct {
	Attempted
	Inventory  string `json:"inventory"`
	Version    string `json:"version"`
	Upgradable bool   `json:"upgradable"`
}

// HelperInput is the helper contract's input, exactly as the Choria Provisioner sends it.
type HelperInput struct {
	Identity      string                     `json:"identity"`
	CSR           *CSRResult                 `json:"csr"`
	ED25519PubKey *ED25519Result             `json:"ed25519_pubkey"`
	Inventory     string                     `json:"inventory"`
	JWT           *tokens.ProvisioningClaims `json:"jwt"`
}

// HelperRequest is the helper activity's input. HadToken tells the worker to put its own token
// back into Input.JWT.Token, which was redacted before the claims entered history.
type HelperRequest struct {
	Requested
	Input    HelperInput `json:"input"`
	HadToken bool        `json:"had_token"`
	// Attempt of Attempts is the workflow's own try of the helper step (it retries the helper
	// itself, one activity attempt each), so a failure is logged as final only when it is.
	// Zero when the workflow did not say.
	Attempt  int `json:"attempt,omitempty"`
	Attempts int `json:"attempts,omitempty"`
}

// ServerClaims are the helper's server_claims (ed25519 feature), as the Choria Provisioner reads them.
type ServerClaims struct {
	ExpiresAt                 *jwt.NumericDate          `json:"exp,omitempty"`
	Collectives               []string                  `json:"collectives,omitempty"`
	OrganizationUnit          string                    `json:"ou,omitempty"`
	Permissions               *tokens.ServerPermissions `json:"permissions,omitempty"`
	AdditionalPublishSubjects []string                  `json:"pub_subjects,omitempty"`
}

// HelperOutput is the helper contract's output.
type HelperOutput struct {
	Attempted
	Defer          bool              `json:"defer"`
	Shutdown       bool              `json:"shutdown"`
	Msg            string            `json:"msg"`
	Certificate    string            `json:"certificate"`
	CA             string            `json:"ca"`
	Key            string            `json:"key,omitempty"` // the helper contract's; emptied into SealedKey before it leaves the worker
	SSLDir         string            `json:"ssldir"`
	Configuration  map[string]string `json:"configuration"`
	ServerClaims   *ServerClaims     `json:"server_claims"`
	ActionPolicies map[string]string `json:"action_policies"`
	OPAPolicies    map[string]string `json:"opa_policies"`
	Upgrade        string            `json:"upgrade"`
	// SealedKey is Key sealed under the worker's secrets key (RunHelper; never the helper's)
	SealedKey *SealedSecret `json:"sealed_key,omitempty"`
}

// SignInput asks for a server JWT for a host's ed25519 public key.
type SignInput struct {
	Requested
	Identity  string            `json:"identity"`
	PublicKey string            `json:"public_key"` // hex, from gen25519
	Config    map[string]string `json:"config"`     // the helper's configuration: collectives and provider shape the defaults
	Claims    *ServerClaims     `json:"claims"`
	Approval
}

// ConfigureInput is the configure RPC's payload.
type ConfigureInput struct {
	Requested
	Identity      string            `json:"identity"`
	Configuration map[string]string `json:"configuration"`
	Certificate   string            `json:"certificate,omitempty"`
	CA            string            `json:"ca,omitempty"`
	SSLDir        string            `json:"ssldir,omitempty"`
	Key           string            `json:"key,omitempty"`         // a history recorded before SealedKey: the helper's private key
	SealedKey     *SealedSecret     `json:"sealed_key,omitempty"`  // the helper's private key, sealed; encrypted for transport by the activity
	ECDHPublic    string            `json:"ecdh_public,omitempty"` // the server's ecdh_public from the jwt step
	ServerJWT     string            `json:"server_jwt,omitempty"`
	// Signer is the signing key's ID of ServerJWT (SignResult.Signer): the audit entry names it
	Signer         string            `json:"signer,omitempty"`
	ActionPolicies map[string]string `json:"action_policies,omitempty"`
	OPAPolicies    map[string]string `json:"opa_policies,omitempty"`
	Approval
}

// UpgradeInput asks a server to update itself to Version from the worker's upgrades_repository.
type UpgradeInput struct {
	Requested
	Identity string `json:"identity"`
	Version  string `json:"version"`
}

// RestartInput is the restart RPC's payload.
type RestartInput struct {
	Requested
	Identity string `json:"identity"`
	Splay    int    `json:"splay"`
}

// MessageResult is the reply of RPCs that return only a message.
type MessageResult struct {
	Attempted
	Message string `json:"message"`
	// At is when the reply came (restart): a workflow task that reads the result may run much
	// later, after a worker's restart
	At time.Time `json:"at,omitzero"`
}
