package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestWireVersion: WIRE.md's version line, the script's header and
// WireVersion name one version.
func TestWireVersion(t *testing.T) {
	doc, err := os.ReadFile("WIRE.md")
	if err != nil {
		t.Fatal(err)
	}
	lua, err := os.ReadFile("tokenbucket.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(redisstore.WireVersion)
	if m := regexp.MustCompile(`(?m)^Wire version: (\d+)$`).FindSubmatch(doc); m == nil || string(m[1]) != want {
		t.Errorf("WIRE.md's version line: %q, want %s", m, want)
	}
	if m := regexp.MustCompile(`(?m)^-- Wire contract: version (\d+) `).FindSubmatch(lua); m == nil || string(m[1]) != want {
		t.Errorf("tokenbucket.lua's header: %q, want version %s", m, want)
	}
}

// serverValue is WIRE.md's server-clock encoding of deficit d and stamp t
// under policy p, numbered n in its registry (n < 0: none, the long form):
// the value and its PEXPIREAT in ms.
func serverValue(d, t int64, p algo.Policy, n int64) (string, int64) {
	idle := t + (d+p.Refill()-1)/p.Refill()
	e := (idle + 999) / 1000
	if n < 0 {
		return fmt.Sprintf("=%d:%d:%d:%d:%d", d, e*1000-idle, p.Capacity(), p.Unit(), p.Refill()), e
	}
	return fmt.Sprintf("%d%05d", d, (e*1000-idle)*100+n), e
}

// clientValue is WIRE.md's client-clock encoding of deficit d and stamp t
// under policy p.
func clientValue(d, t int64, p algo.Policy) string {
	return fmt.Sprintf("%d:%d:%d:%d:%d", d, t, p.Capacity(), p.Unit(), p.Refill())
}

// policyField is p as the script names it: its registry's field.
func policyField(p algo.Policy) string {
	return fmt.Sprintf("%d:%d:%d", p.Capacity(), p.Unit(), p.Refill())
}

// registered is the registry's value for p numbered n: n and p's three
// integers, 64-bit big-endian (WIRE.md, "Policy changes").
func registered(n int64, p algo.Policy) string {
	var b []byte
	for _, x := range []int64{n, p.Capacity(), p.Unit(), p.Refill()} {
		b = binary.BigEndian.AppendUint64(b, uint64(x))
	}
	return string(b)
}

// number returns p's number in the registry reg, numbering it as the
// script does when it has none (WIRE.md, "Policy changes").
func number(t interface {
	Helper()
	Fatal(...any)
}, rdb redis.UniversalClient, reg string, p algo.Policy) int64 {
	t.Helper()
	ctx := context.Background()
	f := policyField(p)
	v, err := rdb.HGet(ctx, reg, f).Result()
	var n int64
	switch {
	case err == redis.Nil:
		if n, err = rdb.HIncrBy(ctx, reg, "#", 1).Result(); err == nil {
			n--
			err = rdb.HSet(ctx, reg, f, registered(n, p), n, f).Err()
		}
	case err == nil && (len(v) != 32 || v[8:] != registered(0, p)[8:]):
		err = fmt.Errorf("registry %s, field %s: %q is not its number and integers", reg, f, v)
	case err == nil:
		n = int64(binary.BigEndian.Uint64([]byte(v)))
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wire is a raw caller of the script: what another runtime does.
type wire struct {
	t   *testing.T
	rdb redis.UniversalClient
}

// call runs the script and returns its integer reply, or the error.
func (w wire) call(keys []string, args ...any) ([]int64, error) {
	w.t.Helper()
	return redisstore.RunInts(ctxT(w.t), w.rdb, keys, args...)
}

func (w wire) must(keys []string, args ...any) []int64 {
	w.t.Helper()
	r, err := w.call(keys, args...)
	if err != nil {
		w.t.Fatalf("script %v %v: %v", keys, args, err)
	}
	return r
}

// TestWireExamples checks WIRE.md's worked examples and reply layouts
// with raw script calls, as another runtime makes them: a burst of 100 at
// 2/s is the policy 100:500000:1 (capacity 100, unit 500000, refill 1).
func TestWireExamples(t *testing.T) {
	rdb := redistest.Start(t).Client()
	w, pre := wire{t, rdb}, redistest.Prefix(t)
	reg, pol := "pol:"+pre, "100:500000:1"
	p := algo.PerSecond(2).Burst(100)
	if v, e := serverValue(500000, 1700000000000123, p, 0); v != "50000087700" || e != 1700000000501 {
		t.Errorf("server encoding of the example = %s, PEXPIREAT %d; WIRE.md says 50000087700, 1700000000501", v, e)
	}
	if f := policyField(p); f != pol {
		t.Errorf("the policy's field = %s, WIRE.md says %s", f, pol)
	}

	// Server clock, the common call (no call letters, the cost of 1 left
	// out): a take on an absent key numbers the policy 0 and stores the
	// encoding of (500000, now).
	k := pre + "server"
	r := w.must([]string{k, reg}, pol)
	now := r[0]
	if want := []int64{now, 1, 1, 99, 0, 500000}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("take reply %v, want %v", r, want)
	}
	if got := rdb.HGetAll(ctxT(t), reg).Val(); fmt.Sprint(got) != fmt.Sprint(map[string]string{"#": "1", pol: registered(0, p), "0": pol}) {
		t.Errorf("registry %v, want the policy numbered 0", got)
	}
	v, e := serverValue(500000, now, p, 0)
	if got, _ := rdb.Get(ctxT(t), k).Result(); got != v {
		t.Errorf("stored %q, want %q", got, v)
	}
	if got, _ := rdb.PExpireTime(ctxT(t), k).Result(); got != time.Duration(e)*time.Millisecond {
		t.Errorf("PEXPIREAT %v, want %d ms", got, e)
	}

	// Server clock, read side: values written by the contract's formula (a
	// stamp an hour ahead, so it is kept), short and long, decode to their
	// deficit and stamp.
	stamp := now + time.Hour.Microseconds() + 123
	for _, n := range []int64{0, -1} {
		k = fmt.Sprint(pre, "decode", n)
		v, e = serverValue(3*500000+7, stamp, p, n)
		if err := rdb.Do(ctxT(t), "SET", k, v, "PXAT", e).Err(); err != nil {
			t.Fatal(err)
		}
		r = w.must([]string{k, reg}, "si", pol, 0)
		if r[6] != 3*500000+7 || r[7] != stamp || r[3] != 96 {
			t.Errorf("si on %s (PXAT %d) = %v; want deficit %d, stamp %d, 96 remaining", v, e, r, 3*500000+7, stamp)
		}
	}

	// Client clock: WIRE.md's example, exactly.
	k = pre + "client"
	r = w.must([]string{k, reg}, "ct", 1700000000000000, 60000, pol, 1)
	if want := []int64{1700000000000000, 1, 1, 99, 0, 500000}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("ct reply %v, want %v", r, want)
	}
	if got, _ := rdb.Get(ctxT(t), k).Result(); got != "500000:1700000000000000:100:500000:1" {
		t.Errorf("stored %q, want 500000:1700000000000000:100:500000:1", got)
	}
	if ttl, _ := rdb.PTTL(ctxT(t), k).Result(); ttl <= 60*time.Second || ttl > 60500*time.Millisecond {
		t.Errorf("PTTL %v, want at most 60500 ms (0.5 s to full, plus the margin)", ttl)
	}

	// Layouts: inspect of an absent key, and a denied multi-take.
	r = w.must([]string{pre + "absent", reg}, "si", pol, 0)
	if want := []int64{r[0], 1, 1, 100, 0, 0, 0, 0, -2}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("si on an absent key = %v, want %v", r, want)
	}
	mk, slow := []string{pre + "{m}a", pre + "{m}b", reg}, "100:1800000000:1" // 2 per hour
	w.must([]string{mk[1], reg}, slow, 100)
	r = w.must(mk, "sm", slow, 1, slow, 1)
	if want := []int64{r[0], 0, 1, 99, 0, 1_800_000_000, 0, 0, r[8], r[9]}; fmt.Sprint(r) != fmt.Sprint(want) || r[8] <= 0 || r[8] > 1_800_000_000 {
		t.Errorf("denied sm = %v, want %v with a retry-after of at most one token", r, want)
	}
	if n, _ := rdb.Exists(ctxT(t), mk[0]).Result(); n != 0 {
		t.Error("a denied multi-take charged the bucket that admitted")
	}
	for _, bad := range [][]any{{"sz", pol, 1}, {"stp", pol, 1}, {"100:500000", 1}, {pol, 1, 1}, {"si", pol}} {
		if _, err := w.call([]string{k, reg}, bad...); err == nil || !regexp.MustCompile(`^RBARG`).MatchString(err.Error()) {
			t.Errorf("%v: %v, want RBARG", bad, err)
		}
	}

	// Client clock: a take of 100, then a reservation of 1 (maxWait 1 s) at
	// the same now put the bucket in debt; the reservation's reply ends with
	// its delay and ticket. A cancel 1 ms later gives its 500000 units back;
	// a refund of 10 tokens and a partial grant of up to 7 follow. WIRE.md's
	// example, exactly.
	k, now = pre+"debt", 1700000000000000
	client := func(op string, at int64, args ...any) []int64 {
		t.Helper()
		return w.must([]string{k, reg}, append([]any{op, at, 60000, pol}, args...)...)
	}
	client("ct", now, 100)
	r = client("cv", now, 1, 1000000)
	if want := []int64{now, 1, 1, 0, 0, 50500000, 500000, now + 500000, 500000, 50000000}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("cv reply %v, want %v", r, want)
	}
	if got, _ := rdb.Get(ctxT(t), k).Result(); got != "50500000:1700000000000000:100:500000:1" {
		t.Errorf("stored %q, want 50500000:1700000000000000:100:500000:1", got)
	}
	r = client("cx", now+1000, now+500000, 500000, 50000000)
	if want := []int64{now + 1000, 1, 1, 0, 0, 49999000, 1}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("cx reply %v, want %v", r, want)
	}
	if got, _ := rdb.Get(ctxT(t), k).Result(); got != "49999000:1700000000001000:100:500000:1" {
		t.Errorf("stored %q, want 49999000:1700000000001000:100:500000:1", got)
	}
	r = client("cr", now+1000, 10)
	if want := []int64{now + 1000, 1, 1, 10, 0, 44999000}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("cr reply %v, want %v", r, want)
	}
	r = client("ca", now+1000, 7)
	if want := []int64{now + 1000, 1, 1, 3, 0, 48499000, 7}; fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("ca reply %v, want %v", r, want)
	}
	// A refund of several keys, one of them absent (nothing written there).
	mk = []string{pre + "{r}a", pre + "{r}b", reg}
	w.must([]string{mk[0], reg}, pol, 5)
	r = w.must(mk, "sr", pol, 2, pol, 2)
	if want := []int64{r[0], 1, 1, 97, 0, r[5], 1, 100, 0, 0}; fmt.Sprint(r) != fmt.Sprint(want) || r[5] <= 1000000 || r[5] > 1500000 {
		t.Errorf("sr reply %v, want %v with a reset-after of at most 1.5 s", r, want)
	}
	if n, _ := rdb.Exists(ctxT(t), mk[1]).Result(); n != 0 {
		t.Error("a refund to an absent key wrote it")
	}
}

// TestRegistryOtherLength: a registry field that is not 32 bytes (a
// draft's number as text) is none: the next take numbers the policy anew,
// writes its number and integers, and decides as on an absent key.
func TestRegistryOtherLength(t *testing.T) {
	rdb := redistest.Start(t).Client()
	w, pre := wire{t, rdb}, redistest.Prefix(t)
	reg, pol, p := "pol:"+pre, "100:500000:1", algo.PerSecond(2).Burst(100)
	if err := rdb.HSet(ctxT(t), reg, pol, "0", "#", 1, "0", pol).Err(); err != nil {
		t.Fatal(err)
	}
	if r := w.must([]string{pre + "k", reg}, pol); r[2] != 1 || r[3] != 99 {
		t.Errorf("take reply %v, want admitted with 99 remaining", r)
	}
	if got := rdb.HGet(ctxT(t), reg, pol).Val(); got != registered(1, p) {
		t.Errorf("registry field %q, want %q (numbered 1)", got, registered(1, p))
	}
}

// TestWireOtherFormats: a value of another format (the article's hash, a
// value written by the article's script itself, the other clock's
// encoding, a hypothetical later version's, digits whose expiry was lost)
// is never misread: the call reports it (reply pair: index 1 and the
// kind), decides on an empty bucket stamped at the call's time, exactly as
// algo does, and rewrites it; with "k" it fails with RBCORRUPT and leaves
// the key alone. Through a Store the repair reaches OnRepair, and
// KeepCorrupt fails with store.ErrCorruptState.
func TestWireOtherFormats(t *testing.T) {
	rdb := redistest.Start(t).Client()
	w, pre := wire{t, rdb}, redistest.Prefix(t)
	ctx := ctxT(t)
	article, err := os.ReadFile("../bench/refscript.lua")
	if err != nil {
		t.Fatal(err)
	}
	set := func(v string, ttl time.Duration) func(string) error {
		return func(k string) error { return rdb.Set(ctx, k, v, ttl).Err() }
	}
	cases := []struct {
		name  string
		write func(key string) error
		clock string // "s" or "c"
		kind  int64
	}{
		{"article's hash", func(k string) error {
			return rdb.HSet(ctx, k, "tokens", 42, "ts", time.Now().UnixMilli()).Err()
		}, "s", 1},
		{"article's script", func(k string) error {
			return redis.NewScript(string(article)).Run(ctx, rdb, []string{k}, 100, 2, time.Now().UnixMilli(), 1).Err()
		}, "c", 1},
		{"client value, server clock", set("500000:1700000000000000:100:500000:1", time.Hour), "s", 2},
		{"server value, client clock", set("50000087700", time.Hour), "c", 2},
		{"long form, client clock", set("=500000:877:100:500000:1", time.Hour), "c", 2},
		{"later version, server clock", set("2|500000|877", time.Hour), "s", 3},
		{"later version, client clock", set("2|500000:1700000000000000", time.Hour), "c", 3},
		{"a draft's client value", set("500000:1700000000000000", time.Hour), "c", 3},
		{"a draft's debt", set("-50500000877", time.Hour), "s", 3},
		{"long form, no policy", set("=500000:877:100:0:1", time.Hour), "s", 3},
		{"digits without expiry", set("50000087700", 0), "s", 4},
	}
	p := algo.PerSecond(2).Burst(100)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := fmt.Sprint(pre, i)
			if err := c.write(k); err != nil {
				t.Fatal(err)
			}
			args := []any{c.clock + "tk"}
			if c.clock == "c" {
				args = append(args, time.Now().UnixMicro(), 60000)
			}
			args = append(args, policyField(p), 1)
			keys := []string{k, pre + "reg"}
			typ, _ := rdb.Type(ctx, k).Result()
			if _, err := w.call(keys, args...); err == nil || !regexp.MustCompile(`^RBCORRUPT key `).MatchString(err.Error()) {
				t.Fatalf("keep (%s): %v, want RBCORRUPT", args[0], err)
			}
			if after, _ := rdb.Type(ctx, k).Result(); after != typ {
				t.Fatalf("keep changed the key's type from %s to %s", typ, after)
			}
			args[0] = c.clock + "t"
			r := w.must(keys, args...)
			_, want, err := algo.TokenBucket{}.Take(p, algo.State{Level: p.Capacity() * p.Unit(), Stamp: r[0]}, r[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(r) != 8 || r[6] != 1 || r[7] != c.kind {
				t.Fatalf("reply %v: want 8 integers ending in the pair 1, %d (kind)", r, c.kind)
			}
			got := algo.Result{Allowed: r[2] == 1, Remaining: r[3], RetryAfter: algo.Micros(r[4]), ResetAfter: algo.Micros(r[5])}
			if got != want {
				t.Fatalf("repaired take = %+v; algo on an empty bucket at %d says %+v", got, r[0], want)
			}
			args[0] = c.clock + "i"
			args[len(args)-1] = 0
			if r := w.must(keys, args...); r[6] != p.Capacity()*p.Unit() {
				t.Fatalf("inspect after the repair = %v; want an empty bucket stamped at the repair", r)
			}
		})
	}

	t.Run("store", func(t *testing.T) {
		log := &repairLog{}
		repair := newStore(t, rdb, redisstore.Config{OnRepair: log.add})
		keep := newStore(t, rdb, redisstore.Config{Prefix: repair.Key(""), Corrupt: redisstore.KeepCorrupt})
		for _, s := range []*redisstore.Store{keep, repair} {
			if err := rdb.HSet(ctx, repair.Key("h"), "tokens", 42, "ts", time.Now().UnixMilli()).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := s.Take(ctx, store.Request{Key: "h", Policy: p, Cost: 1})
			keys, errs := log.take()
			switch {
			case s == keep && !errors.Is(err, store.ErrCorruptState):
				t.Errorf("KeepCorrupt Take on the article's hash = %+v, %v; want store.ErrCorruptState", res, err)
			case s == repair && (err != nil || res.Allowed || len(keys) != 1 || !errors.Is(errs[0], store.ErrCorruptState)):
				t.Errorf("Take on the article's hash = %+v, %v, OnRepair %q %v; want denied, one repair reported", res, err, keys, errs)
			}
		}
	})
}
