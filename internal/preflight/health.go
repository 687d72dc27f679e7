package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/health"
)

// checkHealth looks at health_port: when a provisioner already answers /readyz there (check run
// beside the running service), it reports each component as the service does (temporal, broker,
// discovery); otherwise, that the service will be able to listen there.
func (r *runner) checkHealth(ctx context.Context, cfg *config.Config) {
	if cfg.HealthPort <= 0 {
		r.emit(Result{Name: "health", Status: Warn, Detail: "health_port is 0: no /healthz or /readyz, so probes and health checks have nothing to ask",
			Fix: "set health_port (default 9465)"})
		return
	}
	host := cfg.HealthAddress
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(cfg.HealthPort))
	if rep, code, ok := r.readyz(ctx, "http://"+addr+health.ReadyPath); ok {
		names := make([]string, 0, len(rep.Components))
		for name := range rep.Components {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			c := rep.Components[name]
			res := Result{Name: "ready: " + name, Status: OK, Detail: fmt.Sprintf("%s since %s (the running service's /readyz, %d)", c.State, c.Since.Format("2006-01-02T15:04:05Z07:00"), code)}
			switch c.State {
			case health.Up:
			case health.Starting:
				res.Status, res.Fix = Warn, "the service is starting; ask again"
			default:
				res.Status, res.Detail, res.Fix = Fail, fmt.Sprintf("%s since %s (the service's log says why: component down)", c.State, c.Since.Format("2006-01-02T15:04:05Z07:00")),
					"the service's logs say more; the checks below test the same connections from here"
			}
			r.emit(res)
		}
		return
	}
	l, err := net.Listen("tcp", net.JoinHostPort(cfg.HealthAddress, strconv.Itoa(cfg.HealthPort)))
	if err != nil {
		r.emit(Result{Name: "health", Status: Fail, Detail: fmt.Sprintf("health_port %d: %v", cfg.HealthPort, err),
			Fix: "another program holds the port: choose another health_port (or health_address)"})
		return
	}
	_ = l.Close()
	r.emit(Result{Name: "health", Status: OK, Detail: fmt.Sprintf("/healthz and /readyz will listen on %s", l.Addr())})
}

// readyz asks a running service's /readyz; ok is false when nothing there answers as one does.
func (r *runner) readyz(ctx context.Context, url string) (health.Report, int, bool) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return health.Report{}, 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return health.Report{}, 0, false
	}
	defer resp.Body.Close()
	var rep health.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || rep.Components == nil {
		return health.Report{}, 0, false
	}
	return rep, resp.StatusCode, true
}
