package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// wantTimeout fails unless o is a failure matching context.DeadlineExceeded
// whose message says how far the call got (want).
func wantTimeout(t *testing.T, name string, o outcome, want string) {
	t.Helper()
	if !errors.Is(o.err, context.DeadlineExceeded) || !strings.Contains(o.err.Error(), want) {
		t.Errorf("take %s = %+v, %v; want context.DeadlineExceeded, %q", name, o.res, o.err, want)
	}
}

// TestPipelineStoreTimeoutQueued: a call whose context has no deadline,
// queued behind a pipeline held past the store's Timeout, returns at that
// Timeout (no timer of its own runs for it: the pipeline's alarm wakes it)
// with nothing charged; so does a call that found the queue full. The
// calls held meanwhile carry their contexts' longer deadlines.
func TestPipelineStoreTimeoutQueued(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	s := newStore(t, heldClient(t, srv), redisstore.Config{Timeout: 100 * time.Millisecond,
		Pipeline: redisstore.PipelineConfig{Writers: 1, MaxQueued: 1}})
	p := algo.PerHour(1).Burst(10)
	unpause := pause(t, admin)
	long, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	first := takeAsync(long, s, "first", p)
	waitState(t, s, 0, 1) // first holds the only writer
	queued := takeAsync(context.Background(), s, "queued", p)
	waitState(t, s, 1, 1)
	over := takeAsync(context.Background(), s, "over", p) // the queue is full
	wantTimeout(t, "queued", <-queued, "nothing charged")
	wantTimeout(t, "over", <-over, "queue was full")
	select {
	case o := <-first:
		t.Fatalf("take first returned %+v, %v while the server was paused", o.res, o.err)
	default:
	}
	unpause()
	if o := <-first; o.err != nil || o.res.Remaining != 9 {
		t.Fatalf("take first = %+v, %v; want 9 remaining", o.res, o.err)
	}
	waitState(t, s, 0, 0)
	mustFull(t, s, p, "queued", "over")
	if n := redisstore.Listed(s); n != 0 {
		t.Errorf("the alarm still watches %d calls", n)
	}
}

// TestPipelineStoreTimeoutInFlight: when the store's Timeout passes (the
// alarm rings, run here by the test), a call whose context has no deadline
// returns, whether sent (the script may have run) or queued (nothing
// charged), while the calls of the same pipeline whose contexts' deadlines
// are later still get their replies. (A caller that is itself the writer
// of its pipeline waits in go-redis, bounded by the socket's deadline: the
// latest of its pipeline's.)
func TestPipelineStoreTimeoutInFlight(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	s := newStore(t, heldClient(t, srv), redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 2}})
	p := algo.PerHour(1).Burst(10)
	unpause := pause(t, admin)
	long, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	first := takeAsync(long, s, "first", p)
	waitState(t, s, 0, 1) // first holds a writer
	sent := takeAsync(context.Background(), s, "sent", p)
	waitState(t, s, 1, 1)
	var ws []<-chan outcome
	for i := range redisstore.MinLead - 1 {
		ws = append(ws, takeAsync(long, s, fmt.Sprint("w", i), p))
		if i < redisstore.MinLead-2 {
			waitState(t, s, i+2, 1)
		}
	}
	waitState(t, s, 0, 2) // the last w started a second writer, which took sent and the ws
	held(t, admin, 2)     // both pipelines have reached the server
	queued := takeAsync(context.Background(), s, "queued", p)
	waitState(t, s, 1, 2)
	if n := redisstore.Listed(s); n != 2 {
		t.Errorf("the alarm watches %d calls, want 2 (sent, queued)", n)
	}
	redisstore.Expire(s, time.Now().Add(2*patience))
	wantTimeout(t, "sent", <-sent, "may have run")
	wantTimeout(t, "queued", <-queued, "nothing charged")
	if n := redisstore.Listed(s); n != 0 {
		t.Errorf("the alarm still watches %d calls", n)
	}
	unpause()
	for i, ch := range append(ws, first) {
		if o := <-ch; o.err != nil || o.res.Remaining != 9 {
			t.Errorf("take %d = %+v, %v; want 9 remaining", i, o.res, o.err)
		}
	}
	waitState(t, s, 0, 0)
	mustFull(t, s, p, "queued")
	if b, err := s.Inspect(ctxT(t), "sent", p); err != nil || b.Tokens != 9 { // sent before the Timeout: the script ran
		t.Errorf("Inspect(sent) = %+v, %v; want 9 tokens: the script ran once", b, err)
	}
}
