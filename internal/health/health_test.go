package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/choria-temporal/provisioner/common/logging"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func get(t *testing.T, h http.Handler, path string) (int, Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var r Report
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q", path, ct)
	}
	return rec.Code, r
}

func TestReadyOnlyWhenEveryComponentIsUp(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0).UTC()}
	m := New()
	m.now = c.now
	h := m.Handler()
	m.Expect(Temporal)
	m.Expect(Broker)

	code, r := get(t, h, ReadyPath)
	if code != http.StatusServiceUnavailable || r.Ready || r.Components[Temporal].State != Starting {
		t.Fatalf("nothing observed yet: %d %+v", code, r)
	}
	m.Set(Temporal, nil)
	if code, r = get(t, h, ReadyPath); code != http.StatusServiceUnavailable || r.Components[Broker].State != Starting {
		t.Fatalf("broker still starting: %d %+v", code, r)
	}
	c.t = c.t.Add(time.Second)
	m.Set(Broker, nil)
	if code, r = get(t, h, ReadyPath); code != http.StatusOK || !r.Ready {
		t.Fatalf("both up: %d %+v", code, r)
	}
	upSince := r.Components[Broker].Since

	c.t = c.t.Add(time.Second)
	m.Set(Broker, errors.New("connection lost"))
	code, r = get(t, h, ReadyPath)
	if code != http.StatusServiceUnavailable || r.Components[Broker].State != Down || r.Status != "not ready: broker" {
		t.Fatalf("broker down: %d %+v", code, r)
	}
	if d := m.Report().Components[Broker].Detail; d != "connection lost" {
		t.Fatalf("the reason, in the process: %q", d)
	}
	if got := r.NotReady(); !r.Components[Broker].Since.Equal(c.t) || len(got) != 1 || got[0] != Broker {
		t.Fatalf("down since now, only the broker not ready: %+v", r)
	}
	// a component down is no reason to restart the process
	if code, _ := get(t, h, LivePath); code != http.StatusOK {
		t.Fatalf("healthz while the broker is down: %d", code)
	}

	c.t = c.t.Add(time.Second)
	m.Set(Broker, nil)
	m.Set(Broker, nil)
	if code, r = get(t, h, ReadyPath); code != http.StatusOK || r.Components[Broker].Since.Equal(upSince) || !r.Components[Broker].Since.Equal(c.t) {
		t.Fatalf("up again since the recovery: %d %+v", code, r)
	}
}

func TestAliveOnlyWhileLoopsTurn(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0).UTC()}
	m := New()
	m.now = c.now
	h := m.Handler()
	turn := m.Watch("discovery", time.Minute)

	c.t = c.t.Add(59 * time.Second)
	if code, _ := get(t, h, LivePath); code != http.StatusOK {
		t.Fatalf("within the stall: %d", code)
	}
	c.t = c.t.Add(2 * time.Second)
	code, r := get(t, h, LivePath)
	if code != http.StatusServiceUnavailable || r.Alive || r.Loops["discovery"].Alive {
		t.Fatalf("stalled: %d %+v", code, r)
	}
	// not alive is not ready either
	if code, _ := get(t, h, ReadyPath); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz of a stalled process: %d", code)
	}
	turn()
	if code, _ := get(t, h, LivePath); code != http.StatusOK {
		t.Fatalf("turned again: %d", code)
	}
	c.t = c.t.Add(time.Hour)
	m.Unwatch("discovery")
	if code, _ := get(t, h, LivePath); code != http.StatusOK {
		t.Fatalf("a loop ended on purpose: %d", code)
	}
}

func TestProbeFollowsTheComponent(t *testing.T) {
	m := New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan error)
	done := make(chan struct{})
	m.Expect(Temporal)
	go func() {
		m.Probe(ctx, Temporal, time.Millisecond, time.Second, func(pctx context.Context) error {
			select {
			case err := <-results:
				return err
			case <-pctx.Done():
				return pctx.Err()
			}
		})
		close(done)
	}()
	wait := func(want State) {
		t.Helper()
		for range 1000 {
			if m.Report().Components[Temporal].State == want {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("never %s: %+v", want, m.Report())
	}
	if s := m.Report().Components[Temporal].State; s != Starting {
		t.Fatalf("before the first probe: %s", s)
	}
	results <- errors.New("unavailable")
	wait(Down)
	results <- nil
	wait(Up)
	cancel()
	<-done
	if _, ok := m.Report().Loops["probe:"+Temporal]; ok {
		t.Fatal("the probe's loop is still watched after it ended")
	}
}

func TestServeAnswersOnItsOwnListener(t *testing.T) {
	m := New()
	m.Expect(Broker)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Serve(ctx, "127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + ReadyPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the broker starting: %d", resp.StatusCode)
	}
	resp, err = http.Post("http://"+addr+ReadyPath, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST readyz: %d", resp.StatusCode)
	}
}

// What an unauthenticated caller reads is states and names: the error text of a component
// down (here an address, a user and a file, as a dial or a TLS error holds them) is in no body
// of either path, and goes to the log once per change of state.
func TestProbesServeNamesNotReasons(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0).UTC()}
	m := New()
	m.now = c.now
	core, logs := observer.New(zapcore.InfoLevel)
	m.LogChanges(zap.New(core))
	h := m.Handler()
	m.Expect(Temporal)
	m.Expect(Broker)
	const secret = "nats://provisioner:hunter2@10.20.30.40:4222: open /etc/choria-provisioner/tls/key.pem: permission denied"
	m.Set(Broker, errors.New(secret))
	m.Set(Broker, errors.New(secret)) // the next probe: no change, no line
	m.Set(Temporal, errors.New("dial tcp 10.20.30.41:7233: connection refused"))

	for _, path := range []string{ReadyPath, LivePath} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body := rec.Body.String()
		for _, leak := range []string{"hunter2", "10.20.30.4", "/etc/", "provisioner:", "refused", "detail"} {
			if strings.Contains(body, leak) {
				t.Fatalf("%s serves %q: %s", path, leak, body)
			}
		}
		if path == ReadyPath && (rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, `"status": "not ready: broker, temporal"`)) {
			t.Fatalf("%s: %d %s", path, rec.Code, body)
		}
	}

	down := logs.FilterMessage("component down").FilterField(zap.String(FieldComponent, Broker)).All()
	if len(down) != 1 || down[0].ContextMap()[logging.FieldDetail] != secret || down[0].Level != zapcore.WarnLevel {
		t.Fatalf("want the broker's reason logged once: %+v", down)
	}

	// still down, another reason: logged again only after DetailLogEvery
	m.Set(Broker, errors.New("authorization violation"))
	c.t = c.t.Add(DetailLogEvery)
	m.Set(Broker, errors.New("authorization violation, again"))
	down = logs.FilterMessage("component down").FilterField(zap.String(FieldComponent, Broker)).All()
	if len(down) != 2 || down[1].ContextMap()[logging.FieldDetail] != "authorization violation, again" {
		t.Fatalf("a changed reason a while later: %+v", down)
	}

	m.Set(Broker, nil)
	m.Set(Broker, nil)
	if up := logs.FilterMessage("component up").FilterField(zap.String(FieldComponent, Broker)).All(); len(up) != 1 {
		t.Fatalf("the recovery, once: %+v", up)
	}
	if _, r := get(t, h, ReadyPath); r.Status != "not ready: temporal" {
		t.Fatalf("status: %+v", r)
	}
}

// A stalled loop is named in the status of both paths.
func TestStatusNamesTheStalledLoop(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0).UTC()}
	m := New()
	m.now = c.now
	m.Watch("worker", time.Minute)
	if _, r := get(t, m.Handler(), LivePath); r.Status != "ready" {
		t.Fatalf("turning: %+v", r)
	}
	c.t = c.t.Add(2 * time.Minute)
	for _, path := range []string{LivePath, ReadyPath} {
		if code, r := get(t, m.Handler(), path); code != http.StatusServiceUnavailable || r.Status != "not alive: worker" {
			t.Fatalf("%s: %d %+v", path, code, r)
		}
	}
}
