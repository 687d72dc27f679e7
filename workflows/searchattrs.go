package workflows

import (
	"sort"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// Typed search attributes, upserted on transitions so that the Web UI and `temporal workflow list
// --query` can filter hosts.
var (
	IdentityKey = temporal.NewSearchAttributeKeyKeyword("ProvisionIdentity")
	SiteKey     = temporal.NewSearchAttributeKeyKeyword("ProvisionSite")
	StepKey     = temporal.NewSearchAttributeKeyKeyword("ProvisionStep")
	OutcomeKey  = temporal.NewSearchAttributeKeyKeyword("ProvisionOutcome")
	// SourceKey is how the run's sighting was made (discovery, event, operator, renewal): set at
	// start, so that the audit and `hosts list --renewal failed` find renewal runs by a query
	SourceKey = temporal.NewSearchAttributeKeyKeyword("ProvisionSource")
	// The identity a provisioned run issued (IdentityRecord), set with its outcome: plain
	// times and a key ID, never the JWT or the certificate
	IssuedKey  = temporal.NewSearchAttributeKeyTime("IdentityIssued")
	ExpiresKey = temporal.NewSearchAttributeKeyTime("IdentityExpires")
	SignerKey  = temporal.NewSearchAttributeKeyKeyword("IdentitySigner")
	// ErrorKey is the error type a failed run failed with (HelperError, NoReply, ...; see
	// failureType), set with its outcome: what `hosts list` shows without reading each run's
	// history. The reason itself stays in the encrypted history: a helper's stderr is in it.
	ErrorKey = temporal.NewSearchAttributeKeyKeyword("ProvisionError")
)

// SearchAttributes are the custom search attributes to register on a namespace, by name, with
// their types (enumspb.IndexedValueType).
func SearchAttributes() map[string]enumspb.IndexedValueType {
	attrs := map[string]enumspb.IndexedValueType{}
	for _, k := range []temporal.SearchAttributeKeyKeyword{IdentityKey, SiteKey, StepKey, OutcomeKey, SourceKey, SignerKey, ErrorKey} {
		attrs[k.GetName()] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	for _, k := range []temporal.SearchAttributeKeyTime{IssuedKey, ExpiresKey} {
		attrs[k.GetName()] = enumspb.INDEXED_VALUE_TYPE_DATETIME
	}
	return attrs
}

// SearchAttributeNames lists the custom search attributes to register on a namespace, sorted.
func SearchAttributeNames() []string {
	names := make([]string, 0, 8)
	for n := range SearchAttributes() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// StartSearchAttributes are a new run's search attributes, set by whoever starts it so that the
// run need not upsert them itself (each upsert is a history event and a visibility write). The
// run corrects what a start without them left out (ProvisionHost's first task), so they are its
// record as much as the starter's.
func StartSearchAttributes(identity, site, source string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(IdentityKey.ValueSet(identity), SiteKey.ValueSet(site), OutcomeKey.ValueSet(OutcomeRunning),
		SourceKey.ValueSet(source))
}
