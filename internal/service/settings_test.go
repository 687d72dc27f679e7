package service

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/config"
)

// The activities get cert_deny_list compiled, its /re/ form unwrapped, and the helper's
// environment as the base variables and those helper_env names; none of the base variables is
// one of the provisioner's own (PROVISIONER_*: the token, the codec keys).
func TestActivitySettingsFromTheConfiguration(t *testing.T) {
	cfg := &config.Config{Site: "lab", CertDenyList: []string{`/^web/`, `\.choria$`}, HelperEnv: []string{"SITE_CMDB_URL"}}
	set, err := ActivitySettings(cfg)
	require.NoError(t, err)
	require.Len(t, set.CertDenyList, 2)
	require.True(t, set.CertDenyList[0].MatchString("web1.dc1"), "the /re/ form")
	require.False(t, set.CertDenyList[0].MatchString("/web1"))
	require.True(t, set.CertDenyList[1].MatchString("n1.choria"))
	require.Equal(t, append(append([]string(nil), config.HelperBaseEnv...), "SITE_CMDB_URL"), set.HelperEnv)
	for _, name := range config.HelperBaseEnv {
		require.False(t, strings.HasPrefix(name, "PROVISIONER_"), name)
	}
	require.NotSame(t, &config.HelperBaseEnv[0], &set.HelperEnv[0], "a copy: the base list stays as it is")

	_, err = ActivitySettings(&config.Config{CertDenyList: []string{"("}})
	require.ErrorContains(t, err, "cert_deny_list")
}
