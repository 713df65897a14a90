package bench

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyLen is the length of every benchmark key as stored, prefix included:
// "rl:user:123456789012" is 20 bytes, the reference article's layout.
const KeyLen = 20

// Keys returns n distinct keys such that prefix+key is exactly KeyLen bytes:
// "user:" and a zero-padded index, for an implementation that prepends
// prefix itself. The padding keeps every key the same length, so memory per
// key compares like with like.
func Keys(n int, prefix string) []string {
	// A prefix too long for n keys makes longer keys; the memory report
	// prints the length it measured.
	width := max(KeyLen-len(prefix)-len("user:"), len(fmt.Sprint(n-1)))
	keys := make([]string, n)
	var b strings.Builder
	for i := range keys {
		b.Reset()
		fmt.Fprintf(&b, "user:%0*d", width, i)
		keys[i] = b.String()
	}
	return keys
}

// Load is the outcome of one closed-loop run of [RunLoad].
type Load struct {
	// Calls counts the calls that returned a decision, Admitted those
	// that were admitted, Errors those that returned an error (throttled,
	// for one, gives up on a hot key after 10 failed compare-and-swaps).
	Calls, Admitted, Errors int64
	// FirstErr is the first error, if any.
	FirstErr error
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// PerSecond is the throughput: calls per second of wall time.
func (l Load) PerSecond() float64 { return float64(l.Calls) / l.Elapsed.Seconds() }

// RunLoad drives l from conc goroutines for about d, each calling as fast
// as its previous call returns (a closed loop, like redis-benchmark -c).
// With hot set every call uses keys[0]; otherwise goroutine g starts at
// keys[g·len/conc] and walks the set. It times every call that returns a
// decision and returns the throughput and the latency percentiles; calls
// that fail are counted, not timed.
func RunLoad(l Limiter, keys []string, hot bool, conc int, d time.Duration) (Load, error) {
	return runLoad(func(int) Limiter { return l }, keys, hot, conc, d)
}

// RunFleet is [RunLoad] on one hot key from a fleet: perStore goroutines
// for each of ls, as many app instances, each with its own store, sharing
// one limit.
func RunFleet(ls []Limiter, key string, perStore int, d time.Duration) (Load, error) {
	return runLoad(func(g int) Limiter { return ls[g/perStore] }, []string{key}, true, len(ls)*perStore, d)
}

// runLoad is RunLoad with goroutine g calling limiter(g).
func runLoad(limiter func(g int) Limiter, keys []string, hot bool, conc int, d time.Duration) (Load, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lats []time.Duration
		res  Load
	)
	start := time.Now()
	deadline := start.Add(d)
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiter(g)
			i := g * len(keys) / conc
			local := make([]time.Duration, 0, 4096)
			var admitted, errs int64
			var first error
			for {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				k := keys[0]
				if !hot {
					k = keys[i]
					if i++; i == len(keys) {
						i = 0
					}
				}
				ok, err := l.Allow(k)
				if err != nil {
					if errs++; first == nil {
						first = fmt.Errorf("key %q: %w", k, err)
					}
					continue
				}
				local = append(local, time.Since(t0))
				if ok {
					admitted++
				}
			}
			stop := time.Now()
			mu.Lock()
			defer mu.Unlock()
			// Elapsed ends with the last call, not with the merge
			// of the samples: millions of them (a leased key's
			// local denials) added 0.2 to 0.3 s to a 0.5 s run.
			res.Elapsed = max(res.Elapsed, stop.Sub(start))
			if first != nil && res.FirstErr == nil {
				res.FirstErr = first
			}
			lats = append(lats, local...)
			res.Admitted += admitted
			res.Errors += errs
		}()
	}
	wg.Wait()
	if len(lats) == 0 {
		return res, fmt.Errorf("bench: no call succeeded in %v: %w", d, res.FirstErr)
	}
	slices.Sort(lats)
	res.Calls = int64(len(lats))
	res.P50 = lats[len(lats)/2]
	res.P99 = lats[len(lats)*99/100]
	return res, nil
}

// Memory is what one implementation's state costs Redis per key.
type Memory struct {
	// Keys is how many keys the implementation created for as many
	// buckets (DBSIZE afterwards).
	Keys int64
	// KeyLen is the length of a stored key, as found by RANDOMKEY.
	KeyLen int
	// Usage is MEMORY USAGE of that key (SAMPLES 0: every field).
	Usage int64
	// DeltaPerKey is the used_memory the keys hold, divided by Keys:
	// used_memory with the keys less used_memory once FLUSHALL SYNC has
	// freed them, each less mem_clients_normal (connection buffers grow
	// and shrink on their own schedule). Measured on the way down because
	// a baseline taken before the inserts drifts by hundreds of kB (memory
	// Redis releases later), which swamps small key counts.
	DeltaPerKey float64
}

// MeasureMemory empties the server (FLUSHALL: never point it at a server
// you care about), takes once from every key through l with 16 goroutines,
// and measures the state it left. The policy must keep each key alive for
// the few seconds this takes.
func MeasureMemory(ctx context.Context, c *redis.Client, l Limiter, keys []string) (Memory, error) {
	var m Memory
	if err := FlushSync(ctx, c); err != nil {
		return m, err
	}
	if err := TakeAll(l, keys, 16); err != nil {
		return m, err
	}
	with, err := dataMemory(ctx, c)
	if err != nil {
		return m, err
	}
	if m.Keys, err = c.DBSize(ctx).Result(); err != nil {
		return m, err
	}
	// redisstore's policy registries ("pol:" + prefix, one per
	// cluster slot) are not buckets.
	regs, err := c.Keys(ctx, "pol:*").Result()
	if err != nil {
		return m, err
	}
	if m.Keys -= int64(len(regs)); m.Keys != int64(len(keys)) {
		return m, fmt.Errorf("bench: %d keys in Redis after taking from %d buckets", m.Keys, len(keys))
	}
	var key string
	for key == "" || strings.HasPrefix(key, "pol:") { // a bucket, not a registry
		if key, err = c.RandomKey(ctx).Result(); err != nil {
			return m, err
		}
	}
	m.KeyLen = len(key)
	if m.Usage, err = c.MemoryUsage(ctx, key, 0).Result(); err != nil {
		return m, err
	}
	if err := FlushSync(ctx, c); err != nil {
		return m, err
	}
	without, err := dataMemory(ctx, c)
	if err != nil {
		return m, err
	}
	m.DeltaPerKey = float64(with-without) / float64(m.Keys)
	return m, nil
}

// FlushSync empties every database of the server and frees the memory
// before it returns (FLUSHALL SYNC), whatever lazyfree-lazy-user-flush
// says, so no background free runs into the next measurement.
func FlushSync(ctx context.Context, c *redis.Client) error {
	return c.Do(ctx, "FLUSHALL", "SYNC").Err()
}

// dataMemory returns used_memory less mem_clients_normal.
func dataMemory(ctx context.Context, c *redis.Client) (int64, error) {
	used, err := UsedMemory(ctx, c)
	if err != nil {
		return 0, err
	}
	v, err := infoField(ctx, c, "memory", "mem_clients_normal")
	if err != nil {
		return 0, err
	}
	clients, err := strconv.ParseInt(v, 10, 64)
	return used - clients, err
}

// TakeAll takes once from every key through l, from conc goroutines.
func TakeAll(l Limiter, keys []string, conc int) error {
	var wg sync.WaitGroup
	errs := make([]error, conc)
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(keys); i += conc {
				if _, err := l.Allow(keys[i]); err != nil {
					errs[g] = fmt.Errorf("key %q: %w", keys[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// monitorArg matches one quoted argument of a MONITOR line.
var monitorArg = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// CaptureEval runs call while MONITOR watches the server and returns the
// last EVALSHA the client sent, as arguments (EVALSHA sha numkeys keys...
// args...). A captured EVAL is turned into EVALSHA after SCRIPT LOAD. This
// is how redis-benchmark replays exactly the command a library sends,
// whatever its argument layout.
func CaptureEval(ctx context.Context, c *redis.Client, call func() error) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// go-redis's MonitorCmd polls; a raw connection reading one status
	// line per command is simpler and ends cleanly when closed.
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.Options().Addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	ch := make(chan string, 1024)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		rd := bufio.NewReader(conn)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case ch <- strings.TrimRight(line, "\r\n"):
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() { conn.Close(); <-readDone }()
	// MONITOR starts asynchronously: echo markers until the monitor sees
	// one, and after the call wait for a second marker, so no line is lost.
	var last []string
	waitFor := func(marker string, keep bool) error {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := c.Echo(ctx, marker).Err(); err != nil {
				return err
			}
			for {
				select {
				case line := <-ch:
					args, err := monitorArgs(line)
					if err != nil {
						return err
					}
					if len(args) == 2 && strings.EqualFold(args[0], "echo") && args[1] == marker {
						return nil
					}
					if keep && len(args) > 2 && (strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "eval")) {
						last = args
					}
					continue
				case <-ctx.Done():
					return fmt.Errorf("bench: MONITOR: %w", ctx.Err())
				case <-tick.C:
				}
				break
			}
		}
	}
	if err := waitFor("bench-capture-start", false); err != nil {
		return nil, err
	}
	if err := call(); err != nil {
		return nil, err
	}
	if err := waitFor("bench-capture-end", true); err != nil {
		return nil, err
	}
	if last == nil {
		return nil, errors.New("bench: MONITOR saw no EVAL or EVALSHA")
	}
	if strings.EqualFold(last[0], "eval") {
		sha, err := c.ScriptLoad(ctx, last[1]).Result()
		if err != nil {
			return nil, err
		}
		last[1] = sha
	}
	last[0] = "EVALSHA"
	return last, nil
}

// monitorArgs splits a MONITOR line into its unquoted arguments.
func monitorArgs(line string) ([]string, error) {
	var args []string
	for _, m := range monitorArg.FindAllStringSubmatch(line, -1) {
		a, err := strconv.Unquote(`"` + m[1] + `"`)
		if err != nil {
			return nil, fmt.Errorf("bench: MONITOR line %q: %w", line, err)
		}
		args = append(args, a)
	}
	return args, nil
}

// Ceiling is one redis-benchmark result.
type Ceiling struct {
	PerSecond float64
	P50, P99  time.Duration
}

// RedisBenchmark runs redis-benchmark against addr with clients
// connections, pipeline commands in flight per connection and n requests
// of cmd, where __rand_int__ in cmd takes values below keyspace.
func RedisBenchmark(addr string, clients, pipeline, n, keyspace int, cmd []string) (Ceiling, error) {
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline),
		"-n", strconv.Itoa(n), "-r", strconv.Itoa(keyspace), "--csv"}
	out, err := exec.Command("redis-benchmark", append(args, cmd...)...).Output()
	if err != nil {
		return Ceiling{}, fmt.Errorf("bench: redis-benchmark: %w", err)
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[0]) < 7 {
		return Ceiling{}, fmt.Errorf("bench: redis-benchmark printed %q", out)
	}
	col := map[string]string{}
	for i, name := range rows[0] {
		if i < len(rows[len(rows)-1]) {
			col[name] = rows[len(rows)-1][i]
		}
	}
	var c Ceiling
	ms := func(name string) (time.Duration, error) {
		f, err := strconv.ParseFloat(col[name], 64)
		return time.Duration(f * float64(time.Millisecond)), err
	}
	if c.PerSecond, err = strconv.ParseFloat(col["rps"], 64); err != nil {
		return c, fmt.Errorf("bench: redis-benchmark rps %q: %w", col["rps"], err)
	}
	if c.P50, err = ms("p50_latency_ms"); err != nil {
		return c, err
	}
	if c.P99, err = ms("p99_latency_ms"); err != nil {
		return c, err
	}
	return c, nil
}
