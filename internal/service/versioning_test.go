package service

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"
)

// The newest build wins by release order, whatever order replicas start in; scripts/version.sh's
// builds between releases order by their commit count, and a build without a version never
// takes a fleet from one that has one.
func TestNewerBuild(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		newer bool
	}{
		{"1.1.0", "1.0.0", true},
		{"1.0.0", "1.1.0", false},
		{"1.0.0", "1.0.0", false},
		{"1.0.1-dev.3+gabc1234", "1.0.0", true},
		{"1.0.1", "1.0.1-dev.3+gabc1234", true}, // the release after its pre-releases
		{"1.0.1-dev.10+gabc1234", "1.0.1-dev.9+gdef5678", true},
		{"1.0.1-dev.3+gabc1234", "1.0.1-dev.3+gdef5678", false}, // the SHA does not order
		{"1.0.0-dev.12+g0123456.dirty", "1.0.0-dev.11+g0123456", true},
		{developmentBuild, "1.0.0", false},
		{"1.0.0", developmentBuild, true},
		{developmentBuild, developmentBuild, false},
	} {
		require.Equal(t, c.newer, newerBuild(c.a, c.b), "%s newer than %s", c.a, c.b)
	}
}

func TestDeploymentOptions(t *testing.T) {
	o := deploymentOptions("site.a:1", "")
	require.True(t, o.UseVersioning)
	require.Equal(t, "site-a-1", o.Version.DeploymentName, "a deployment name holds no '.' nor ':'")
	require.Equal(t, developmentBuild, o.Version.BuildID)
	require.Equal(t, workflow.VersioningBehaviorAutoUpgrade, o.DefaultVersioningBehavior, "deferred hosts move to the new build")
	require.Equal(t, "1.2.3", deploymentOptions("q", "1.2.3").Version.BuildID)
}
