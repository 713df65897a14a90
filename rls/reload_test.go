package rls_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// limitsOf is a one-limit configuration of n per second.
func limitsOf(n int) string {
	return "domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: " + itoa(int64(n)) + "\n"
}

// broken fails on line 5.
const broken = "domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: sec\n      requests_per_unit: 1\n"

// reloadRig serves a Loader of a temporary file holding limitsOf(10).
func reloadRig(t *testing.T) (r *rig, l *rls.Loader, path string, reg *prometheus.Registry) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "limits.yaml")
	write(t, path, limitsOf(10))
	reg = prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err = rls.NewLoader(path, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := memory.open(t, storetest.NewClock())
	return serve(t, l, rls.Options{Store: st, Metrics: m}, nil), l, path, reg
}

func limitIn(t *testing.T, r *rig) uint32 {
	t.Helper()
	return r.ask(t, "r", 0, desc("k=v")).Statuses[0].CurrentLimit.GetRequestsPerUnit()
}

// TestReloadKeepsOldConfigOnError: a reload swaps the configuration in; a
// file that fails keeps the old one, returns the error naming the file
// and line, and is counted.
func TestReloadKeepsOldConfigOnError(t *testing.T) {
	r, l, path, reg := reloadRig(t)
	if n := limitIn(t, r); n != 10 {
		t.Fatalf("limit %d, want 10", n)
	}
	write(t, path, limitsOf(20))
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := limitIn(t, r); n != 20 {
		t.Fatalf("after reload: limit %d, want 20", n)
	}
	write(t, path, broken)
	err := l.Reload()
	var ce *rls.ConfigError
	if !errors.As(err, &ce) || ce.File != path || ce.Line != 5 || !strings.Contains(ce.Msg, `unknown unit "sec"`) {
		t.Fatalf("reload of a broken file: %v, want a ConfigError at %s:5", err, path)
	}
	if n := limitIn(t, r); n != 20 {
		t.Fatalf("after a failed reload: limit %d, want the old 20", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratebucket_rls_config_last_reload_successful 1 if the last configuration reload succeeded, 0 if it failed and an older configuration is in use.
# TYPE ratebucket_rls_config_last_reload_successful gauge
ratebucket_rls_config_last_reload_successful 0
# HELP ratebucket_rls_config_reloads_total Configuration reloads by result: success, or error (the previous configuration stays).
# TYPE ratebucket_rls_config_reloads_total counter
ratebucket_rls_config_reloads_total{result="error"} 1
ratebucket_rls_config_reloads_total{result="success"} 2
`), "ratebucket_rls_config_last_reload_successful", "ratebucket_rls_config_reloads_total"); err != nil {
		t.Fatal(err)
	}
}

// TestReloadUnderLoadDropsNothing: requests sent while the configuration
// is reloaded over and over (good and broken files alike, through the
// injected trigger of Loader.Watch) all succeed, each under one of the
// configurations.
func TestReloadUnderLoadDropsNothing(t *testing.T) {
	r, l, path, _ := reloadRig(t)
	ctx, cancel := context.WithCancel(t.Context())
	trigger := make(chan struct{})
	reloaded := make(chan error)
	l.OnReload = func(err error) { reloaded <- err }
	var wg sync.WaitGroup
	wg.Go(func() { l.Watch(ctx, trigger) })

	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				resp, err := r.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "r", Descriptors: descs("k=v")})
				if err == nil && resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()%10 != 0 {
					err = errors.New("a request saw no configuration: " + resp.String())
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range 30 {
		text := limitsOf(10 * (1 + i%3))
		if i%5 == 4 {
			text = broken
		}
		write(t, path, text)
		trigger <- struct{}{}
		if err := <-reloaded; (err != nil) != (text == broken) {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	cancel()
	wg.Wait()
}

// TestWatchFilesReloadsOnChange: WatchFiles notices a new file renamed
// over the old one (as editors and ConfigMaps do) and the Loader reloads
// it. The test waits for the reload event, not for time.
func TestWatchFilesReloadsOnChange(t *testing.T) {
	r, l, path, _ := reloadRig(t)
	reloaded := make(chan error, 8)
	l.OnReload = func(err error) {
		select {
		case reloaded <- err:
		default: // the test has seen enough
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	changed, err := l.WatchFiles(ctx, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { l.Watch(ctx, changed) })
	defer func() { cancel(); wg.Wait() }()

	tmp := filepath.Join(filepath.Dir(path), ".limits.yaml.tmp")
	write(t, tmp, limitsOf(40))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	// Writing the temporary file may already cause a reload (of the old
	// contents); the rename causes one of the new.
	guard := time.After(30 * time.Second) // a hang guard, not a timing
	for n := limitIn(t, r); n != 40; n = limitIn(t, r) {
		select {
		case err := <-reloaded:
			if err != nil {
				t.Fatal(err)
			}
		case <-guard:
			t.Fatalf("no reload to the new file: limit still %d", n)
		}
	}
}
