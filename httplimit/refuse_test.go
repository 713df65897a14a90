package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// TestDelayOnQuotaRefusedAtNew pins issue 28's failing-open case: Delay on
// a route whose limit is a calendar quota. New used to accept it; every
// request's reservation then failed in the store ("not an operation of a
// calendar quota") and FailOpen served it: 10 of 10 admitted against a
// quota of 5, on memstore and redisstore alike. New, and With for a route,
// now refuse it, naming the limit, with an error that matches
// ErrInvalidConfig and algo.ErrQuotaUnsupported.
func TestDelayOnQuotaRefusedAtNew(t *testing.T) {
	quota := algo.Quota(5, algo.Day, 0)
	for _, c := range []struct {
		name, want string
		cfg        Config
	}{
		{"policy", `limit "daily"`, Config{Delay: time.Second, Limits: []Limit{{Name: "daily", Policy: quota}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Store = newStore(t, newClock())
			_, err := New(c.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, algo.ErrQuotaUnsupported) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v; want ErrInvalidConfig and algo.ErrQuotaUnsupported naming %s", err, c.want)
			}
		})
	}
	t.Run("With", func(t *testing.T) {
		m := newMW(t, Config{Store: newStore(t, newClock()), Limits: []Limit{{Name: "daily", Policy: quota}}})
		if _, err := m.With(Config{Delay: time.Second}); !errors.Is(err, algo.ErrQuotaUnsupported) || !strings.Contains(err.Error(), `"daily"`) {
			t.Fatalf("With(Delay) over a quota: %v; want algo.ErrQuotaUnsupported naming \"daily\"", err)
		}
		// The same limits without Delay count the quota: 5 of 10.
		var admitted int
		h := m.Handler(ok)
		for range 10 {
			if do(h, "192.0.2.1:1").Code == http.StatusOK {
				admitted++
			}
		}
		if admitted != 5 {
			t.Fatalf("%d of 10 admitted by a quota of 5 a day", admitted)
		}
	})
}

// TestQuotaUnsupportedIsInvalid: a quota that reaches a store unable to
// apply it (memstore under a window algorithm, a store's configuration
// New cannot see) is a misconfigured request: 500, logged, never the
// FailMode's free pass.
func TestQuotaUnsupportedIsInvalid(t *testing.T) {
	s, err := memstore.New(memstore.Config{Clock: newClock(), Algorithm: algo.FixedWindow{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ev events
	m := newMW(t, Config{Store: s, Observer: ev.Observe, Logger: slog.New(slog.DiscardHandler),
		Limits: []Limit{{Name: "daily", Policy: algo.Quota(5, algo.Day, 0)}}})
	if w := do(m.Handler(ok), "192.0.2.1:1"); w.Code != http.StatusInternalServerError {
		t.Fatalf("code %d, want 500", w.Code)
	}
	if e := ev.last(t); e.Outcome != Invalid || !errors.Is(e.Err, algo.ErrQuotaUnsupported) {
		t.Fatalf("event %+v, want Invalid with algo.ErrQuotaUnsupported", e)
	}
}
