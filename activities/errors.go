package activities

import (
	"errors"

	"go.temporal.io/sdk/temporal"
)

// Error types carried by Temporal application errors, so the workflow and operators can classify
// a failure without parsing its message.
const (
	ErrTypeRPC             = "RPCError"              // the request could not be made or travel (broker, transport, ours): retryable
	ErrTypeNoReply         = "NoReply"               // the request went out and the host did not answer in time: retryable
	ErrTypeLocked          = "ProvisioningLocked"    // another caller holds the provisioning lock: retryable
	ErrTypeAborted         = "RPCAborted"            // the agent refused the request: retryable within budget
	ErrTypeNotProvisioning = "NotInProvisioningMode" // Temporal confirms the server was provisioned after the sighting: not retryable
	// the server answered that it is not in provisioning mode; on its word alone: retryable
	// within budget, and the run fails if it persists
	ErrTypeHostNotProvisioning = "HostSaysNotProvisioning"
	ErrTypeBadReply            = "BadReply"          // wrong sender, several replies, undecodable: retryable
	ErrTypeInvalidJWT          = "InvalidJWT"        // provisioning JWT not signed by the trusted issuer: not retryable
	ErrTypeBadSignature        = "BadNonceSignature" // gen25519 signature does not verify: not retryable
	ErrTypeHelper              = "HelperError"       // helper failed, timed out or printed garbage: retryable
	ErrTypeSigning             = "SigningError"      // server JWT could not be made: not retryable
	ErrTypeAudit               = "AuditUnavailable"  // the audit sink could not take the issuance, so it was not sent: retryable
	ErrTypeBanned              = "Banned"            // the host is banned (hosts ban): not retryable
	ErrTypeConfig              = "ConfigError"       // the helper's reply cannot be used: not retryable
	ErrTypeCSR                 = "CSRRejected"       // CSR unparsable, of another name, or denied: not retryable
	ErrTypeTooLarge            = "InventoryTooLarge" // the server's inventory exceeds MaxInventoryBytes: not retryable
	// a task of another workflow than a host's, for another host, or with a payload that is not
	// ours: not retryable. The codec's refusal of a payload is of the same type (its
	// ErrTypeRefused; a test holds the two together), so one rule classifies both.
	ErrTypeRefused = "Refused"
)

// Sentinel errors, each a distinct reason a user can act on: wrapped by the errors a step
// returns, so errors.Is finds them.
var (
	// of a helper run
	ErrHelperTimeout  = errors.New("helper timed out")
	ErrHelperExit     = errors.New("helper exited with a non-zero status")
	ErrHelperEmpty    = errors.New("helper printed nothing")
	ErrHelperDecode   = errors.New("helper output is not a JSON object")
	ErrHelperTooLarge = errors.New("helper output is too large")
	ErrHelperStart    = errors.New("helper could not be started")

	// of the pki feature and key transport
	ErrCSRInvalid  = errors.New("CSR is not valid")
	ErrCSRDenied   = errors.New("CSR names a denied certificate name")
	ErrCSRMismatch = errors.New("CSR common name does not match the identity")
	ErrNoECDH      = errors.New("private key received from helper but server did not start Diffie-Hellman exchange")
	ErrBadKey      = errors.New("private key from the helper is not PEM")

	// of token handling
	ErrInvalidJWT       = errors.New("provisioning JWT is not valid")
	ErrBadNonce         = errors.New("ed25519 nonce signature does not verify")
	ErrSigning          = errors.New("cannot sign server JWT")
	ErrNoChainSignature = errors.New("jwt_signing_token has no trust chain signature")
	ErrSignerExpired    = errors.New("jwt_signing_token has expired")
)

// nonRetryable is the one list of error types no retry can cure: NewError marks them so, and
// the workflow's retry policies name them (NonRetryableErrorTypes).
var nonRetryable = []string{ErrTypeInvalidJWT, ErrTypeBadSignature, ErrTypeSigning, ErrTypeConfig, ErrTypeNotProvisioning, ErrTypeCSR, ErrTypeTooLarge,
	ErrTypeRefused, ErrTypeOtherRun, ErrTypeStaleApproval, ErrTypeBanned}

// NonRetryableErrorTypes lists the error types a retry policy must not retry.
func NonRetryableErrorTypes() []string { return append([]string(nil), nonRetryable...) }

// NewError is an application error of the given type, retryable unless the type is one no
// retry can cure.
func NewError(errType, msg string, cause error) error {
	for _, t := range nonRetryable {
		if t == errType {
			return temporal.NewNonRetryableApplicationError(msg, errType, cause)
		}
	}
	return temporal.NewApplicationErrorWithCause(msg, errType, cause)
}

// Retryable is false for an error that was marked non-retryable and for a cancellation.
func Retryable(err error) bool {
	var app *temporal.ApplicationError
	return !(errors.As(err, &app) && app.NonRetryable()) && !temporal.IsCanceledError(err)
}

// IsNoReply is true when a step failed because the host never answered.
func IsNoReply(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == ErrTypeNoReply
}
