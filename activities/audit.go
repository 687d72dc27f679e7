package activities

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/common/logging"
)

// Auditor takes what the provisioner did to an identity, outside the namespace (auditlog.Log).
type Auditor interface {
	Append(ctx context.Context, e auditlog.Entry) (auditlog.Entry, error)
}

// WithAudit appends every issuance to log before the configure RPC sends it. failOpen sends it
// even when the log cannot take it (logged, counted); otherwise nothing is sent.
func WithAudit(log Auditor, failOpen bool) Option {
	return func(a *Activities) { a.audit, a.auditFailOpen = log, failOpen }
}

// appendIssuance appends what in is about to send, when it sends an identity: the server JWT's
// or the certificate's expiry, signer and subject key; no secret.
func (a *Activities) appendIssuance(ctx context.Context, in ConfigureInput) error {
	if a.audit == nil {
		return nil
	}
	info := activity.GetInfo(ctx)
	rec := IssuedIdentity(info.StartedTime, in.ServerJWT, in.Signer, in.Certificate, in.CA)
	if rec == nil {
		return nil // nothing with an expiry is sent: no identity
	}
	e := auditlog.Entry{Kind: auditlog.KindIssued, Identity: in.Identity, Site: a.set.Site, Workflow: info.WorkflowExecution.ID,
		RunID: info.WorkflowExecution.RunID, Signer: rec.Signer, Expires: rec.Expires, Subject: subjectKey(in)}
	written, err := a.audit.Append(ctx, e)
	if err == nil {
		a.logger(ctx, in.Identity, StepConfigure).Debug("issuance audited", zap.Uint64(logging.FieldAuditSeq, written.Seq))
		return nil
	}
	a.metrics.AuditFailures.WithLabelValues(a.set.Site).Inc()
	if a.auditFailOpen {
		a.logger(ctx, in.Identity, StepConfigure).Warn("issuance not audited, sent anyway (audit.fail_open)", zap.Error(err))
		return nil
	}
	return NewError(ErrTypeAudit, "the identity was not sent: "+err.Error(), err)
}

// subjectKey is the SHA-256 of the public key the identity is issued for: the certificate's, or
// the server JWT's public_key claim.
func subjectKey(in ConfigureInput) string {
	if cert := firstCertificate(in.Certificate); cert != nil {
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	parts := strings.Split(in.ServerJWT, ".")
	if len(parts) != 3 {
		return ""
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		PublicKey string `json:"public_key"`
	}
	if json.Unmarshal(body, &c) != nil || c.PublicKey == "" {
		return ""
	}
	key, err := hex.DecodeString(c.PublicKey)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Bans says which identities are banned (auditlog.Index): the audit's own entries, outside the
// namespace, authenticated with the audit key.
type Bans interface {
	State(ctx context.Context, identity string) (auditlog.HostState, error)
}

// WithBans refuses to sign or send an identity to a banned host, whatever the helper says.
func WithBans(b Bans) Option { return func(a *Activities) { a.bans = b } }

// refuseBanned fails closed: a banned host, or a ban list that cannot be read, gets nothing.
func (a *Activities) refuseBanned(ctx context.Context, identity string) error {
	if a.bans == nil {
		return nil
	}
	st, err := a.bans.State(ctx, identity)
	if err != nil {
		a.metrics.AuditFailures.WithLabelValues(a.set.Site).Inc()
		return NewError(ErrTypeAudit, "the ban list (the audit sink) cannot be read: nothing is signed or sent: "+err.Error(), err)
	}
	if !st.Banned {
		return nil
	}
	a.metrics.BannedRefused.WithLabelValues(a.set.Site).Inc()
	return NewError(ErrTypeBanned, fmt.Sprintf("%s is banned (since %s by %s: %s): no identity is issued to it until hosts unban",
		identity, st.Since.UTC().Format(time.RFC3339), st.By, st.Reason), nil)
}
