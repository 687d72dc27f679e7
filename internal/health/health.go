package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/httpserve"
	"github.com/choria-temporal/provisioner/common/logging"
)

// Monitor holds the components' states and the loops' last turns of one process.
type Monitor struct {
	mu     sync.Mutex
	now    func() time.Time
	log    *zap.Logger
	comps  map[string]*Status
	logged map[string]time.Time // when each component's state was last logged
	loops  map[string]*watchdog
}

// DetailLogEvery is how often, at most, a component that stays down has its changed error text
// logged again: the first error of an outage ("being dialled") is often not the one that
// explains it, and a probe every few seconds must not write a line each.
const DetailLogEvery = time.Minute

type watchdog struct {
	last  time.Time
	stall time.Duration
}

// New is a Monitor with no component: ready and alive until components and loops are added.
func New() *Monitor {
	return &Monitor{now: time.Now, log: zap.NewNop(), comps: map[string]*Status{}, logged: map[string]time.Time{}, loops: map[string]*watchdog{}}
}

// LogChanges logs to log each change of a component's state, with the error text of a component
// down: the log is where the reason is, since what Handler serves holds none.
func (m *Monitor) LogChanges(log *zap.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = log
}

// Expect registers a component the process runs, Starting until it is first Set.
func (m *Monitor) Expect(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.comps[name]; !ok {
		m.comps[name] = &Status{State: Starting, Since: m.now()}
	}
}

// Set records what was observed of a component: up, or down for the reason err. Since changes
// only when the state does, so it says how long the component has been up (or down).
func (m *Monitor) Set(name string, err error) {
	state, detail := Up, ""
	if err != nil {
		state, detail = Down, err.Error()
	}
	m.mu.Lock()
	now, log := m.now(), m.log
	c, ok := m.comps[name]
	changed := !ok || c.State != state
	say := changed || (state == Down && detail != c.Detail && now.Sub(m.logged[name]) >= DetailLogEvery)
	if changed {
		c = &Status{State: state, Since: now}
		m.comps[name] = c
	}
	c.Detail = detail
	if say {
		m.logged[name] = now
	}
	m.mu.Unlock()
	switch {
	case !say:
	case state == Up:
		log.Info("component up", zap.String(FieldComponent, name), zap.String(FieldState, string(state)))
	default:
		log.Warn("component down", zap.String(FieldComponent, name), zap.String(FieldState, string(state)), zap.String(logging.FieldDetail, detail))
	}
}

// Watch registers a loop that must turn at least once every stall; the returned function is
// its turn. A loop that stops turning makes the process not alive (/healthz 503): a supervisor
// restarts it. Registering counts as a turn.
func (m *Monitor) Watch(name string, stall time.Duration) (turn func()) {
	m.mu.Lock()
	m.loops[name] = &watchdog{last: m.now(), stall: stall}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if w, ok := m.loops[name]; ok {
			w.last = m.now()
		}
	}
}

// Unwatch removes a loop that ended on purpose (its context ended).
func (m *Monitor) Unwatch(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.loops, name)
}

// Report is every component's state and every loop's last turn, now.
func (m *Monitor) Report() Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	r := Report{Ready: true, Alive: true, Components: map[string]Status{}, Loops: map[string]Loop{}}
	for name, c := range m.comps {
		r.Components[name] = *c
		if c.State != Up {
			r.Ready = false
		}
	}
	var stalled []string
	for name, w := range m.loops {
		alive := now.Sub(w.last) <= w.stall
		r.Loops[name] = Loop{Alive: alive, LastTurn: w.last, Stall: w.stall.String()}
		if !alive {
			r.Alive = false
			stalled = append(stalled, name)
		}
	}
	sort.Strings(stalled)
	switch {
	case !r.Alive:
		r.Status = "not alive: " + strings.Join(stalled, ", ")
	case !r.Ready:
		r.Status = "not ready: " + strings.Join(r.NotReady(), ", ")
	default:
		r.Status = "ready"
	}
	return r
}

// NotReady names the components that are not up, sorted: for logs and `check`.
func (r Report) NotReady() []string {
	var out []string
	for name, c := range r.Components {
		if c.State != Up {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Probe keeps component name's state from probe, run every interval (each bounded by timeout)
// until ctx ends; the probing loop is itself watched, so a probe that hangs past its timeout
// makes the process not alive.
func (m *Monitor) Probe(ctx context.Context, name string, every, timeout time.Duration, probe func(context.Context) error) {
	m.Expect(name)
	turn := m.Watch("probe:"+name, every+2*timeout)
	defer m.Unwatch("probe:" + name)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.Set(name, err)
		turn()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Handler serves LivePath (200 alive, 503 a loop stalled) and ReadyPath (200 alive and every
// component up, 503 otherwise), each with the Report as JSON. It asks no credentials (a kubelet
// or a load balancer presents none), so it serves states, names and times only: the components'
// error text stays out of it (Status.Detail), in the log (LogChanges).
func (m *Monitor) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+LivePath, func(w http.ResponseWriter, _ *http.Request) {
		r := m.Report()
		writeReport(w, r.Alive, r)
	})
	mux.HandleFunc("GET "+ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		r := m.Report()
		writeReport(w, r.Ready && r.Alive, r)
	})
	return mux
}

func writeReport(w http.ResponseWriter, ok bool, r Report) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}

// Serve serves Handler on addr until ctx ends, and returns the bound address (useful with
// port 0) once listening.
func Serve(ctx context.Context, addr string, m *Monitor) (string, error) {
	return httpserve.Serve(ctx, "health", addr, m.Handler())
}
