package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Renewal is off by default, with the documented defaults ready for when it is turned on.
func TestRenewalDefaults(t *testing.T) {
	cfg, err := Load(writeConfig(t, ""))
	require.NoError(t, err)
	require.False(t, cfg.Renewal.Enabled)
	require.Equal(t, 30*24*time.Hour, cfg.Renewal.RenewBeforeDuration)
	require.Equal(t, time.Hour, cfg.Renewal.IntervalDuration)
	require.Equal(t, 10.0, cfg.Renewal.Rate)
	require.Zero(t, cfg.Renewal.WindowStart+cfg.Renewal.WindowEnd, "no window: any time")
}

func TestRenewalEnabled(t *testing.T) {
	choria := filepath.Join(t.TempDir(), "admin.conf")
	require.NoError(t, os.WriteFile(choria, []byte("collectives = choria\n"), 0o600))
	cfg, err := Load(writeConfig(t, "renewal:\n  enabled: true\n  renew_before: 2m\n  interval: 5s\n  rate: 600\n  window: 22:30-04:00\n  choria_config: "+choria+"\n"))
	require.NoError(t, err)
	require.True(t, cfg.Renewal.Enabled)
	require.Equal(t, 2*time.Minute, cfg.Renewal.RenewBeforeDuration)
	require.Equal(t, 5*time.Second, cfg.Renewal.IntervalDuration)
	require.Equal(t, 600.0, cfg.Renewal.Rate)
	require.Equal(t, 22*60+30, cfg.Renewal.WindowStart)
	require.Equal(t, 4*60, cfg.Renewal.WindowEnd, "a window may wrap midnight")
}

// Every bad value is refused with the key named.
func TestRenewalInvalid(t *testing.T) {
	choria := filepath.Join(t.TempDir(), "admin.conf")
	require.NoError(t, os.WriteFile(choria, []byte("collectives = choria\n"), 0o600))
	for body, want := range map[string]string{
		"renewal:\n  renew_before: soon\n":                                      "renewal.renew_before: \"soon\" is not a positive duration",
		"renewal:\n  renew_before: 0s\n":                                        "renewal.renew_before",
		"renewal:\n  interval: 500ms\n":                                         "renewal.interval: \"500ms\" is not a duration of at least 1s",
		"renewal:\n  rate: 0\n":                                                 "renewal.rate: 0: hosts per minute, more than 0",
		"renewal:\n  rate: -1\n":                                                "renewal.rate",
		"renewal:\n  window: 22:00\n":                                           "renewal.window: \"22:00\": want HH:MM-HH:MM",
		"renewal:\n  window: 25:00-01:00\n":                                     "\"25:00\" is not a time HH:MM",
		"renewal:\n  window: 01:00-01:00\n":                                     "an empty window",
		"renewal:\n  enabled: true\n":                                           "renewal.choria_config: required when renewal.enabled is on",
		"renewal:\n  enabled: true\n  choria_config: /nonexistent/admin.conf\n": "renewal.choria_config: open /nonexistent/admin.conf",
		"renewal:\n  renew_befor: 3d\n":                                         "unknown key renewal.renew_befor: did you mean renewal.renew_before?",
		"renewal:\n  enable: true\n  choria_config: " + choria + "\n":           "unknown key renewal.enable: did you mean renewal.enabled?",
	} {
		_, err := Load(writeConfig(t, body))
		require.ErrorIs(t, err, ErrInvalid, body)
		require.ErrorContains(t, err, want, body)
	}
	t.Setenv("PROVISIONER_RENEWAL__RATE", "20")
	cfg, err := Load(writeConfig(t, ""))
	require.NoError(t, err)
	require.Equal(t, 20.0, cfg.Renewal.Rate, "the environment sets the section's keys too")
}

func TestParseWindow(t *testing.T) {
	s, e, err := ParseWindow(" 01:05-23:59 ")
	require.NoError(t, err)
	require.Equal(t, []int{65, 23*60 + 59}, []int{s, e})
	for _, bad := range []string{"1-2", "01:5-02:00", "aa:bb-01:00", "01:00-24:00", "01:00-"} {
		_, _, err := ParseWindow(bad)
		require.Error(t, err, bad)
	}
}
