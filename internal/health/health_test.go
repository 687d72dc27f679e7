package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
	if code != http.StatusServiceUnavailable || r.Components[Broker].State != Down || r.Components[Broker].Detail != "connection lost" {
		t.Fatalf("broker down: %d %+v", code, r)
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
