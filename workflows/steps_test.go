package workflows

import "testing"

// Every step the sequence runs has a row; an unknown one is a programming error, not a zero row.
func TestEveryStepHasARow(t *testing.T) {
	for _, step := range []string{StepJWT, StepGen25519, StepInventory, StepGencsr, StepHelper, StepSign,
		StepConfigure, StepRestart, StepUpgrade, StepShutdown} {
		spec := specOf(step)
		if spec.activity == nil || spec.options.StartToCloseTimeout <= 0 || spec.options.RetryPolicy == nil || spec.summary == "" {
			t.Errorf("%s: incomplete row %+v", step, spec)
		}
	}
	if s := specOf(StepHelper); s.attempts != 5 || !s.findable || !s.helper {
		t.Errorf("helper row: %+v", s)
	}
	if s := specOf(StepSign); !s.local {
		t.Errorf("sign row: %+v", s)
	}
	if s := specOf(StepConfigure); !s.effect || s.local {
		t.Errorf("configure row: %+v", s)
	}
	defer func() {
		if recover() == nil {
			t.Error("a step without a row did not panic")
		}
	}()
	specOf(StepDone)
}
