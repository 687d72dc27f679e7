package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Renewal is the renewal section: whether and how the identities the provisioner issued are
// renewed before they lapse (renewal/api.go). Off by default: a site turns it on knowingly,
// since a renewal restarts each server it reaches into provisioning mode.
type Renewal struct {
	Enabled bool `koanf:"enabled"`
	// RenewBefore: an identity expiring within this long is renewed ("30d")
	RenewBefore string `koanf:"renew_before"`
	// Rate: hosts asked to re-enter provisioning mode per minute, at most
	Rate float64 `koanf:"rate"`
	// Interval of the renewal Schedule
	Interval string `koanf:"interval"`
	// Window "HH:MM-HH:MM" (UTC) in which renewals may start; empty: any time; may wrap midnight
	Window string `koanf:"window"`
	// ChoriaConfig is a Choria client configuration that reaches provisioned servers (their
	// collective and account), as `hosts reprovision --choria-config`
	ChoriaConfig string `koanf:"choria_config"`

	// Parsed forms, filled by Load.
	RenewBeforeDuration time.Duration `koanf:"-"`
	IntervalDuration    time.Duration `koanf:"-"`
	// WindowStart and WindowEnd are the window's bounds in minutes after midnight UTC (both
	// zero: no window)
	WindowStart, WindowEnd int `koanf:"-"`
}

// minRenewalInterval is the shortest Schedule interval: seconds, so that tests need not wait.
const minRenewalInterval = time.Second

func renewalDefaults() map[string]any {
	return map[string]any{
		"renewal.enabled":      false,
		"renewal.renew_before": "30d",
		"renewal.rate":         10,
		"renewal.interval":     "1h",
	}
}

// validateRenewal parses the renewal section; choria_config is required only when it is on.
func (c *Config) validateRenewal() error {
	r := &c.Renewal
	var err error
	if r.RenewBeforeDuration, err = ParseDuration(r.RenewBefore); err != nil || r.RenewBeforeDuration <= 0 {
		return invalid("renewal.renew_before", "%q is not a positive duration", r.RenewBefore)
	}
	if r.IntervalDuration, err = ParseDuration(r.Interval); err != nil || r.IntervalDuration < minRenewalInterval {
		return invalid("renewal.interval", "%q is not a duration of at least %v", r.Interval, minRenewalInterval)
	}
	if r.Rate <= 0 {
		return invalid("renewal.rate", "%v: hosts per minute, more than 0", r.Rate)
	}
	if r.WindowStart, r.WindowEnd, err = ParseWindow(r.Window); err != nil {
		return invalid("renewal.window", "%v", err)
	}
	if r.Enabled && strings.TrimSpace(r.ChoriaConfig) == "" {
		return invalid("renewal.choria_config", "required when renewal.enabled is on: a Choria client configuration that reaches provisioned servers")
	}
	if r.Enabled {
		if err := readable(r.ChoriaConfig); err != nil {
			return invalid("renewal.choria_config", "%v", err)
		}
	}
	return nil
}

// ParseWindow reads "HH:MM-HH:MM" (UTC) into minutes after midnight; "" is no window (0, 0).
// The end may be before the start: the window wraps midnight.
func ParseWindow(s string) (start, end int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, 0, nil
	}
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want HH:MM-HH:MM (UTC)", s)
	}
	if start, err = minuteOfDay(from); err != nil {
		return 0, 0, fmt.Errorf("%q: %w", s, err)
	}
	if end, err = minuteOfDay(to); err != nil {
		return 0, 0, fmt.Errorf("%q: %w", s, err)
	}
	if start == end {
		return 0, 0, fmt.Errorf("%q: an empty window; leave it out for any time", s)
	}
	return start, end, nil
}

func minuteOfDay(hm string) (int, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(hm), ":")
	hh, herr := strconv.Atoi(h)
	mm, merr := strconv.Atoi(m)
	if !ok || herr != nil || merr != nil || len(m) != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q is not a time HH:MM", hm)
	}
	return hh*60 + mm, nil
}
