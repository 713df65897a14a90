package main

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// load is a run of the demo's load generator, in the manner of
// `ab -n N -c C -H "x-user-id: test-user" URL`: n GET requests from c
// workers, spread round-robin over the targets as a load balancer would,
// optionally paced to qps requests per second in total.
type load struct {
	targets []string // full URLs, one per instance
	header  http.Header
	n, c    int
	qps     float64 // 0: as fast as the workers go
}

// loadResult is what the load generator saw.
type loadResult struct {
	Status map[int]int `json:"status"` // count per HTTP status code
	Errors int         `json:"errors"` // requests that got no response
	// FirstError is the first transport error, for the report.
	FirstError string `json:"first_error,omitempty"`
	// Elapsed runs from the first request sent to the last response
	// read: every limiter decision of the run happened inside it.
	Elapsed time.Duration `json:"elapsed_ns"`
	request histogram
}

// run sends the requests and waits for every response, or for ctx to end.
func (l load) run(ctx context.Context, client *http.Client, prog *progress) loadResult {
	var (
		next    atomic.Int64 // index of the next request to send
		mu      sync.Mutex
		res     = loadResult{Status: map[int]int{}}
		wg      sync.WaitGroup
		start   = time.Now()
		pace    time.Duration
		workers = min(l.c, l.n)
	)
	if l.qps > 0 {
		pace = time.Duration(float64(time.Second) / l.qps)
	}
	for range workers {
		wg.Go(func() {
			var lat histogram
			status := map[int]int{}
			var errs int
			var firstErr string
			for {
				i := next.Add(1) - 1
				if i >= int64(l.n) || ctx.Err() != nil {
					break
				}
				if pace > 0 && !sleepUntil(ctx, start.Add(time.Duration(i)*pace)) {
					break
				}
				t0 := time.Now()
				code, err := l.get(ctx, client, l.targets[i%int64(len(l.targets))])
				if err != nil {
					if errs++; firstErr == "" {
						firstErr = err.Error()
					}
				} else {
					status[code]++
					lat.record(time.Since(t0))
				}
				prog.add(1)
			}
			mu.Lock()
			defer mu.Unlock()
			for k, v := range status {
				res.Status[k] += v
			}
			res.Errors += errs
			if res.FirstError == "" {
				res.FirstError = firstErr
			}
			res.request.merge(&lat)
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// get sends one request and reads the whole body, so the connection can be
// reused.
func (l load) get(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range l.header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// sleepUntil waits until t or until ctx ends, and reports whether t came.
// The load generator paces real requests against a real server: this is
// the one place the CLI waits on the real clock.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newLoadClient returns an HTTP client that keeps up to c connections per
// instance alive, so the run measures the server rather than TCP set-up.
func newLoadClient(c int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = c
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}
