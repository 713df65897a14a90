package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// timerClock is a clock.Mock that announces each timer it makes, so a
// test knows when a request is held and for how long.
type timerClock struct {
	*clock.Mock
	timers chan time.Duration
}

func (c timerClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d) // set before it is announced: the test moves the clock next
	c.timers <- d
	return t
}

// delayRig is a route with Delay over a memstore, on one mock clock; its
// handler reports the time at which each request runs.
type delayRig struct {
	clk timerClock
	m   *Middleware
	h   http.Handler
	ran chan time.Time
	ev  *events
	t0  time.Time
}

// newDelayRig builds a route of burst 3, 1 token a second, holding
// requests for up to delay.
func newDelayRig(t *testing.T, delay time.Duration) *delayRig {
	t.Helper()
	clk := timerClock{Mock: clock.NewMock(), timers: make(chan time.Duration, 16)}
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := &delayRig{clk: clk, ran: make(chan time.Time, 16), ev: &events{}, t0: clk.Now()}
	d.m = newMW(t, Config{Store: newStore(t, clk), Clock: clk, Observer: d.ev.Observe,
		Limits: []Limit{{Policy: algo.PerSecond(1).Burst(3)}}, Delay: delay})
	d.h = d.m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.ran <- clk.Now() }))
	return d
}

// send sends a request (with ctx, when not nil) in the background.
func (d *delayRig) send(ctx context.Context) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		done <- do(d.h, "192.0.2.1:1234", func(r *http.Request) {
			if ctx != nil {
				*r = *r.WithContext(ctx)
			}
		})
	}()
	return done
}

// held sends a request and returns once it is held for want.
func (d *delayRig) held(t *testing.T, ctx context.Context, want time.Duration) <-chan *httptest.ResponseRecorder {
	t.Helper()
	done := d.send(ctx)
	if got := <-d.clk.timers; got != want {
		t.Fatalf("request held for %v, want %v", got, want)
	}
	return done
}

// runs expects the handler to run now, at offset want from the start.
func (d *delayRig) runs(t *testing.T, want time.Duration) {
	t.Helper()
	if got := (<-d.ran).Sub(d.t0); got != want {
		t.Fatalf("handler ran at +%v, want +%v", got, want)
	}
}

// TestDelaySmoothsBurst: a burst of seven against burst 3 at 1/s with a
// Delay of 3s. Three are served at once; three are held and run exactly
// at their reserved times, 1s apart; the seventh would wait 4s and gets
// 429 with Retry-After 1, when it would fit.
func TestDelaySmoothsBurst(t *testing.T) {
	d := newDelayRig(t, 3*time.Second)
	for range 3 {
		done := d.send(nil)
		d.runs(t, 0)
		if w := <-done; w.Code != 200 {
			t.Fatalf("code %d", w.Code)
		}
	}
	var held []<-chan *httptest.ResponseRecorder
	for i := 1; i <= 3; i++ {
		held = append(held, d.held(t, nil, time.Duration(i)*time.Second))
	}
	w := <-d.send(nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("seventh: %d, Retry-After %q; want 429 and 1", w.Code, w.Header().Get("Retry-After"))
	}
	for i, done := range held {
		d.clk.Add(time.Second)
		d.runs(t, time.Duration(i+1)*time.Second)
		if w := <-done; w.Code != 200 {
			t.Fatalf("held request %d: code %d", i, w.Code)
		}
	}
	var delays []time.Duration
	for _, e := range d.ev.ev {
		if e.Outcome == Allowed {
			delays = append(delays, e.Delay)
		}
	}
	if want := []time.Duration{0, 0, 0, time.Second, 2 * time.Second, 3 * time.Second}; !equalDurations(delays, want) {
		t.Fatalf("Allowed events with delays %v, want %v", delays, want)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDelayDisconnect: a client that leaves while its request is held is
// not served, is reported Cancelled, and gets its tokens back when its
// reservation is the latest; when a later one is held behind it, its
// tokens stay spent and the later one keeps its time.
func TestDelayDisconnect(t *testing.T) {
	drain := func(d *delayRig) {
		for range 3 {
			<-d.send(nil)
			<-d.ran
		}
	}
	t.Run("latest", func(t *testing.T) {
		d := newDelayRig(t, 3*time.Second)
		drain(d)
		ctx, cancel := context.WithCancel(context.Background())
		done := d.held(t, ctx, time.Second)
		cancel()
		<-done
		if e := d.ev.last(t); e.Outcome != Cancelled || e.Delay != time.Second || !errors.Is(e.Err, context.Canceled) {
			t.Fatalf("event %+v, want Cancelled after a hold of 1s", e)
		}
		// Its token came back: the next request waits 1s, not 2s.
		next := d.held(t, nil, time.Second)
		d.clk.Add(time.Second)
		d.runs(t, time.Second)
		<-next
	})
	t.Run("not latest", func(t *testing.T) {
		d := newDelayRig(t, 3*time.Second)
		drain(d)
		ctx, cancel := context.WithCancel(context.Background())
		first := d.held(t, ctx, time.Second)
		second := d.held(t, nil, 2*time.Second)
		cancel()
		<-first
		d.clk.Add(time.Second)
		select {
		case at := <-d.ran:
			t.Fatalf("a request ran at +%v; the cancelled one must not", at.Sub(d.t0))
		default:
		}
		d.clk.Add(time.Second)
		d.runs(t, 2*time.Second)
		<-second
		// The first one's token was not given back: the bucket is empty.
		if got := remaining(t, d.m)[0]; got != 0 {
			t.Fatalf("%d tokens at +2s, want 0", got)
		}
	})
}

// TestDelayDeadline: a request whose deadline comes before its turn is
// refused at once with 429, charging nothing.
func TestDelayDeadline(t *testing.T) {
	d := newDelayRig(t, 3*time.Second)
	for range 3 {
		<-d.send(nil)
		<-d.ran
	}
	ctx, cancel := d.clk.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	w := <-d.send(ctx)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("code %d, want 429", w.Code)
	}
	next := d.held(t, nil, time.Second) // nothing was reserved
	d.clk.Add(time.Second)
	d.runs(t, time.Second)
	<-next
}

// TestDelayConfig: Delay needs a single limit and a store that reserves,
// and may not be negative.
func TestDelayConfig(t *testing.T) {
	two := []Limit{{Name: "a", Policy: algo.PerSecond(1).Burst(1)}, {Name: "b", Policy: algo.PerMinute(9).Burst(9)}}
	tests := []struct {
		name string
		cfg  Config
		also error
	}{
		{"negative", Config{Delay: -time.Second}, nil},
		{"two limits", Config{Delay: time.Second, Limits: two}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || tc.also != nil && !errors.Is(err, tc.also) {
				t.Fatalf("New: %v, want ErrInvalidConfig %v", err, tc.also)
			}
		})
	}
	m := newMW(t, Config{Limits: two})
	if _, err := m.With(Config{Delay: time.Second}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("With: %v, want ErrInvalidConfig", err)
	}
	if _, err := m.With(Config{Delay: time.Second, Limits: two[:1]}); err != nil {
		t.Fatalf("With one limit: %v", err)
	}
}

// TestDelayUnsupported: a store that has Reserve but not the operation
// (memstore under a window algorithm) makes a Delay route misconfigured:
// 500, logged, and never the FailMode's free pass.
func TestDelayUnsupported(t *testing.T) {
	s, err := memstore.New(memstore.Config{Clock: newClock(), Algorithm: algo.FixedWindow{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ev events
	m := newMW(t, Config{Store: s, Delay: time.Second, Observer: ev.Observe, Logger: slog.New(slog.DiscardHandler)})
	if w := do(m.Handler(ok), "192.0.2.1:1234"); w.Code != http.StatusInternalServerError {
		t.Fatalf("code %d, want 500", w.Code)
	}
	if e := ev.last(t); e.Outcome != Invalid || !errors.Is(e.Err, store.ErrUnsupported) {
		t.Fatalf("event %+v, want Invalid with store.ErrUnsupported", e)
	}
}
