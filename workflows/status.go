package workflows

import "time"

// StepRecord is one run of a step in the timeline.
type StepRecord struct {
	Step     string    `json:"step"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitempty"`
	Attempts int32     `json:"attempts,omitempty"` // activity attempts this run took (0: unknown)
	Error    string    `json:"error,omitempty"`
	Note     string    `json:"note,omitempty"` // what the step changed of what was asked (a capped server JWT expiry)
}

// Status is what the status query returns.
type Status struct {
	Identity       string    `json:"identity"`
	Site           string    `json:"site"`
	Step           string    `json:"step"`
	Attempt        int       `json:"attempt"` // run of the current step by the workflow (the helper's are counted here)
	Outcome        string    `json:"outcome"`
	Paused         bool      `json:"paused,omitempty"`
	Message        string    `json:"message,omitempty"`
	LastError      string    `json:"last_error,omitempty"`
	HelperDecision string    `json:"helper_decision,omitempty"`
	HelperMessage  string    `json:"helper_message,omitempty"`
	Defers         int       `json:"defers"`
	Source         string    `json:"source"`           // how the run's sighting was made
	SeenAt         time.Time `json:"seen_at,omitzero"` // when (zero from operators)
	ServerVersion  string    `json:"server_version,omitempty"`
	Upgraded       string    `json:"upgraded,omitempty"` // version the server was upgraded to
	// Issued is the identity the run issued, once it configured the server with it
	Issued   *IdentityRecord `json:"issued,omitempty"`
	Timeline []StepRecord    `json:"timeline"`
}
