package workflows

import "github.com/choria-temporal/provisioner/activities"

// IdentityRecord is what a provisioned run issued to its host (activities.IdentityRecord).
type IdentityRecord = activities.IdentityRecord
