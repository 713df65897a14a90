package redisstore_test

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestCorruptState: with KeepCorrupt a key holding anything but a bucket
// is an error matching store.ErrCorruptState, not a panic and not a
// decision; Reset makes the key usable again.
func TestCorruptState(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	server := newStore(t, rdb, redisstore.Config{Corrupt: redisstore.KeepCorrupt})
	client := newStore(t, rdb, redisstore.Config{Prefix: server.Key(""), Clock: storetest.NewClock(), Corrupt: redisstore.KeepCorrupt})
	p := algo.PerSecond(2).Burst(10)
	tests := []struct {
		name  string
		s     *redisstore.Store
		write func(key string) error
	}{
		{"hash", server, func(k string) error { return rdb.HSet(ctxT(t), k, "tokens", 3).Err() }},
		{"list", server, func(k string) error { return rdb.RPush(ctxT(t), k, "x").Err() }},
		{"garbage string", server, func(k string) error { return rdb.Set(ctxT(t), k, "garbage", 0).Err() }},
		{"digits without expiry", server, func(k string) error { return rdb.Set(ctxT(t), k, "123456", 0).Err() }},
		{"too many digits", server, func(k string) error { return rdb.Set(ctxT(t), k, "99999999999999999999", time.Hour).Err() }},
		{"client format under server clock", server, func(k string) error { return rdb.Set(ctxT(t), k, "5:6:"+policyField(p), time.Hour).Err() }},
		{"server format under client clock", client, func(k string) error { return rdb.Set(ctxT(t), k, "5006", time.Hour).Err() }},
		{"client format, bad stamp", client, func(k string) error { return rdb.Set(ctxT(t), k, "5:x", time.Hour).Err() }},
		{"client format, huge deficit", client, func(k string) error {
			return rdb.Set(ctxT(t), k, "9007199254740993:6:"+policyField(p), time.Hour).Err()
		}},
		{"long form, huge deficit", server, func(k string) error {
			return rdb.Set(ctxT(t), k, "=9007199254740993:6:"+policyField(p), time.Hour).Err()
		}},
		{"a draft's client format", client, func(k string) error { return rdb.Set(ctxT(t), k, "5:6", time.Hour).Err() }},
		{"empty string", client, func(k string) error { return rdb.Set(ctxT(t), k, "", time.Hour).Err() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			if err := tc.write(tc.s.Key(key)); err != nil {
				t.Fatal(err)
			}
			for _, cost := range []int64{1, 0} {
				if res, err := tc.s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: cost}); !errors.Is(err, store.ErrCorruptState) {
					t.Fatalf("Take(cost %d) on a corrupt key = %+v, %v; want store.ErrCorruptState", cost, res, err)
				}
			}
			if _, err := tc.s.Inspect(ctxT(t), key, p); !errors.Is(err, store.ErrCorruptState) {
				t.Fatalf("Inspect on a corrupt key: %v; want store.ErrCorruptState", err)
			}
			if err := tc.s.Reset(ctxT(t), key); err != nil {
				t.Fatal(err)
			}
			if res, err := tc.s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: 1}); err != nil || !res.Allowed || res.Remaining != 9 {
				t.Fatalf("Take after Reset = %+v, %v; want a full bucket charged once", res, err)
			}
		})
	}
}

// TestInspect: Inspect reports the bucket without charging it or writing.
func TestInspect(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	clk := storetest.NewClock()
	s := newStore(t, rdb, redisstore.Config{Clock: clk, TTLMargin: 2 * time.Second})
	p := algo.PerSecond(2).Burst(10) // a token every 500ms

	b, err := s.Inspect(ctxT(t), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	if b.Exists || b.Tokens != 10 || b.FullIn != 0 || b.TTL != 0 || !b.Now.Equal(storetest.Start) {
		t.Fatalf("Inspect of a new key = %+v, want absent and full at %v", b, storetest.Start)
	}
	if _, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 4}); err != nil {
		t.Fatal(err)
	}
	clk.Add(700 * time.Millisecond)
	for range 2 { // twice: the first must not have written anything
		b, err = s.Inspect(ctxT(t), "k", p)
		if err != nil {
			t.Fatal(err)
		}
		want := redisstore.Bucket{Key: s.Key("k"), Exists: true, Now: storetest.Start.Add(700 * time.Millisecond),
			Tokens: 7, Limit: 10, FullIn: 1300 * time.Millisecond, Deficit: 4 * p.Unit(), Stamp: storetest.Start, TTL: b.TTL}
		if b.Now.Equal(want.Now) && b.Stamp.Equal(want.Stamp) {
			want.Now, want.Stamp = b.Now, b.Stamp // same instants; compare the rest
		}
		if b != want {
			t.Fatalf("Inspect = %+v\nwant      %+v", b, want)
		}
	}
	// Client clock: the TTL is the fill time at the take plus the margin.
	if b.TTL <= 3900*time.Millisecond || b.TTL > 4*time.Second {
		t.Errorf("TTL %v, want 2s to fill plus the 2s margin", b.TTL)
	}
}

// TestClientClockTTL: with a client clock keys outlive their fill time by
// TTLMargin (Redis's clock may run ahead of the client's), or never expire.
func TestClientClockTTL(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	p := algo.PerMinute(60).Burst(100) // 1 token a second
	tests := []struct {
		name     string
		margin   time.Duration
		min, max time.Duration // PTTL after taking 3 tokens
	}{
		{"default margin", 0, 3*time.Second + redisstore.DefaultTTLMargin - time.Second, 3*time.Second + redisstore.DefaultTTLMargin},
		{"margin 10s", 10 * time.Second, 12 * time.Second, 13 * time.Second},
		{"margin 1µs rounds up to 1ms", time.Microsecond, 2 * time.Second, 3*time.Second + time.Millisecond},
		{"no expiry", -1, -1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, rdb, redisstore.Config{Clock: storetest.NewClock(), TTLMargin: tc.margin})
			if _, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 3}); err != nil {
				t.Fatal(err)
			}
			defer s.Reset(ctxT(t), "k") // a key without expiry would stay on a shared server
			ttl := rdb.PTTL(ctxT(t), s.Key("k")).Val()
			if tc.min < 0 && ttl != -1 || tc.min >= 0 && (ttl < tc.min || ttl > tc.max) {
				t.Fatalf("PTTL = %v, want in [%v, %v] (-1: none)", ttl, tc.min, tc.max)
			}
		})
	}
}

// TestServerClockExpiresWhenFull: with the server clock the key expires at
// the millisecond the bucket is full again, and a full bucket is deleted.
func TestServerClockExpiresWhenFull(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{})
	p := algo.PerHour(3600).Burst(50)
	if _, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 7}); err != nil {
		t.Fatal(err)
	}
	b, err := s.Inspect(ctxT(t), "k", p)
	if err != nil {
		t.Fatal(err)
	}
	idle := b.Stamp.Add(7 * time.Second).UnixMicro()
	if exp := rdb.PExpireTime(ctxT(t), s.Key("k")).Val(); exp.Milliseconds() != (idle+999)/1000 {
		t.Fatalf("PEXPIRETIME %d ms, want %d (full at %d µs)", exp.Milliseconds(), (idle+999)/1000, idle)
	}
	if enc := rdb.ObjectEncoding(ctxT(t), s.Key("k")).Val(); enc != "int" {
		t.Errorf("OBJECT ENCODING %q, want int", enc)
	}
	// A peek of a key that was never charged writes nothing.
	if _, err := s.Take(ctxT(t), store.Request{Key: "peek", Policy: p, Cost: 0}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctxT(t), s.Key("peek")).Val(); n != 0 {
		t.Errorf("peek created the key")
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name   string
		client redis.UniversalClient
		want   error
	}{
		{"unbounded client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1}), redisstore.ErrUnboundedClient},
		{"unbounded cluster client", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: -1}), redisstore.ErrUnboundedClient},
		{"no read deadlines at all", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -2, ContextTimeoutEnabled: true}), redisstore.ErrUnboundedClient},
		{"no read timeout but context deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1, ContextTimeoutEnabled: true}), nil},
		{"default client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.Close()
			_, err := redisstore.New(tc.client, redisstore.Config{})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := redisstore.New(nil, redisstore.Config{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	// A tag hashes every key to one slot; an empty or unclosed brace would
	// take the hash tags of store.GroupKey's keys apart.
	for _, prefix := range []string{"{rl}:", "app:{x}", "a{}b:", "x{:", "y}:"} {
		if _, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix}); !errors.Is(err, redisstore.ErrHashTagPrefix) {
			t.Errorf("New with prefix %q: %v, want ErrHashTagPrefix", prefix, err)
		}
	}
	for _, prefix := range []string{"rl:", "a:b:"} {
		if _, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix}); err != nil {
			t.Errorf("New with prefix %q: %v", prefix, err)
		}
	}
}

// TestServerClockWritesOnlyCharges: with the server clock a denial or a
// peek does not write (no SET reaches Redis, nothing to replicate).
func TestServerClockWritesOnlyCharges(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{})
	p := algo.PerHour(1).Burst(2)
	steps := []struct {
		name   string
		cost   int64
		allow  bool
		writes bool
	}{
		{"peek of a new key", 0, true, false},
		{"charge", 2, true, true},
		{"denial", 1, false, false},
		{"peek", 0, true, false},
	}
	for _, st := range steps {
		before := calls(t, rdb, "set")
		res, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: st.cost})
		if err != nil || res.Allowed != st.allow {
			t.Fatalf("%s: Take = %+v, %v; want Allowed %v", st.name, res, err, st.allow)
		}
		if wrote := calls(t, rdb, "set") > before; wrote != st.writes {
			t.Errorf("%s: wrote %v, want %v", st.name, wrote, st.writes)
		}
	}
}

// TestGarbageNeverPanics: whatever string a key holds, with or without an
// expiry, a Take decides sanely: the script never errors and never hands
// out more than capacity, and a key it repairs answers as an empty bucket.
func TestGarbageNeverPanics(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	var repairs atomic.Int64
	count := func(string, error) { repairs.Add(1) }
	server := newStore(t, rdb, redisstore.Config{OnRepair: count})
	client := newStore(t, rdb, redisstore.Config{Prefix: server.Key(""), Clock: storetest.NewClock(), OnRepair: count})
	p := algo.PerMinute(60).Burst(10)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		key := "g" + strconv.Itoa(n)
		v := rapid.OneOf(
			rapid.StringMatching(`[0-9]{0,25}`),
			rapid.StringMatching(`[0-9]{0,20}:[0-9]{0,20}`),
			rapid.StringMatching(`-?[0-9.e+:x ]{0,12}`),
			rapid.String(),
		).Draw(rt, "value")
		ttl := rapid.SampledFrom([]time.Duration{0, time.Hour, 100 * 365 * 24 * time.Hour}).Draw(rt, "ttl")
		s := rapid.SampledFrom([]*redisstore.Store{server, client}).Draw(rt, "store")
		if err := rdb.Set(ctxT(t), s.Key(key), v, ttl).Err(); err != nil {
			rt.Fatal(err)
		}
		defer s.Reset(ctxT(t), key)
		cost := rapid.Int64Range(0, p.Capacity()).Draw(rt, "cost")
		before := repairs.Load()
		res, err := s.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: cost})
		repaired := repairs.Load() != before
		switch {
		case err != nil:
			rt.Fatalf("Take on %q: %v, want a decision", v, err)
		case res.Remaining < 0 || res.Remaining > p.Capacity() || res.RetryAfter < 0 || res.ResetAfter < 0 || res.Allowed != (res.RetryAfter == 0):
			rt.Fatalf("Take on %q = %+v: out of bounds", v, res)
		case repaired && (res.Remaining != 0 || res.Allowed != (cost == 0)):
			rt.Fatalf("Take(cost %d) on %q repaired the key but answered %+v; want an empty bucket", cost, v, res)
		}
	})
}
