package workflows

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/choria-temporal/provisioner/activities"
)

// activityName is the name of the activity a row refers to by method value.
func activityName(spec stepSpec) string {
	name := runtime.FuncForPC(reflect.ValueOf(spec.activity).Pointer()).Name()
	name = strings.TrimSuffix(name, "-fm")
	return name[strings.LastIndex(name, ".")+1:]
}

// The step table and the activities' registrations are one list: every registered activity has
// its step's row, naming it; every row names a registered activity; each row is complete.
func TestTheStepTableIsTheRegistrations(t *testing.T) {
	rows := map[string]stepSpec{}
	for _, s := range stepTable() {
		if _, dup := rows[s.step]; dup {
			t.Errorf("%s: two rows", s.step)
		}
		rows[s.step] = s
		if s.activity == nil || s.options.StartToCloseTimeout <= 0 || s.options.RetryPolicy == nil || s.summary == "" {
			t.Errorf("%s: incomplete row %+v", s.step, s)
		}
	}
	catalog := activities.Catalog()
	if len(catalog) != len(rows) {
		t.Errorf("%d registrations, %d rows", len(catalog), len(rows))
	}
	for _, r := range catalog {
		s, ok := rows[r.Step]
		if !ok {
			t.Errorf("activity %s serves step %s, which has no row", r.Name, r.Step)
			continue
		}
		if got := activityName(s); got != r.Name {
			t.Errorf("step %s: the row runs %s, the registration is %s", r.Step, got, r.Name)
		}
	}
	if s := specOf(StepHelper); s.attempts() != helperAttempts || !s.findable() {
		t.Errorf("helper row: %+v", s)
	}
	if s := specOf(StepConfigure); s.kind != kindEffect {
		t.Errorf("configure row: %+v", s)
	}
	defer func() {
		if recover() == nil {
			t.Error("a step without a row did not panic")
		}
	}()
	specOf(StepDone)
}

// Discovery's echo check follows the table: the last step a run upserts (the helper), or restart.
func TestMayBeFinishingFollowsTheTable(t *testing.T) {
	for step, want := range map[string]bool{StepJWT: false, StepInventory: false, StepHelper: true, StepUpgrade: false,
		StepConfigure: false, StepRestart: true, StepDeferred: false, StepDone: false} {
		if got := MayBeFinishing(step); got != want {
			t.Errorf("MayBeFinishing(%s) = %v", step, got)
		}
	}
}
