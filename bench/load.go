package bench

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

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
			mu.Lock()
			defer mu.Unlock()
			if first != nil && res.FirstErr == nil {
				res.FirstErr = first
			}
			lats = append(lats, local...)
			res.Admitted += admitted
			res.Errors += errs
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if len(lats) == 0 {
		return res, fmt.Errorf("bench: no call succeeded in %v: %w", d, res.FirstErr)
	}
	slices.Sort(lats)
	res.Calls = int64(len(lats))
	res.P50 = lats[len(lats)/2]
	res.P99 = lats[len(lats)*99/100]
	return res, nil
}
