package rls_test

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestEnvoyExamples loads each example configuration of envoyproxy/ratelimit's
// README (testdata/examples, copied verbatim) and checks that a real gRPC
// client gets the answers the README describes, on memstore, a real
// redis-server and a local Redis Cluster. Where the token bucket differs
// from the fixed window (rls/README.md) the step says so: a token comes
// back after 1/rate instead of at the window's end, and a refusal's
// duration_until_reset is the exact wait.
func TestEnvoyExamples(t *testing.T) {
	for _, b := range []backend{memory, onRedis(t), onCluster(t)} {
		t.Run(b.name, func(t *testing.T) {
			for _, ex := range examples {
				t.Run(ex.file, func(t *testing.T) {
					cfg, err := rls.Load(filepath.Join("testdata", "examples", ex.file))
					if err != nil {
						t.Fatal(err)
					}
					clk := storetest.NewClock()
					st, cluster := b.open(t, clk)
					r := serve(t, cfg, rls.Options{Store: st, Cluster: cluster}, nil)
					ex.run(t, &asker{t: t, r: r, domain: cfg.Domains()[0]}, clk)
				})
			}
		})
	}
}

// asker sends requests to one domain and compares the answers.
type asker struct {
	t      *testing.T
	r      *rig
	domain string
	last   *pb.RateLimitResponse
}

// want sends the descriptors (hits_addend 1 unless set on them) and
// checks the answer's rendering (see render).
func (a *asker) want(want string, ds ...[]string) {
	a.t.Helper()
	descs := make([]*rlpb.RateLimitDescriptor, len(ds))
	for i, d := range ds {
		descs[i] = desc(d...)
	}
	a.wantD(want, descs...)
}

func (a *asker) wantD(want string, ds ...*rlpb.RateLimitDescriptor) {
	a.t.Helper()
	a.last = a.r.ask(a.t, a.domain, 0, ds...)
	if got := render(a.last); got != want {
		a.t.Fatalf("%v: got %s, want %s", ds, got, want)
	}
}

// wait checks the last answer's duration_until_reset for status i.
func (a *asker) wait(i int, want time.Duration) {
	a.t.Helper()
	if got := a.last.Statuses[i].DurationUntilReset.AsDuration(); got != want {
		a.t.Fatalf("status %d: duration_until_reset %v, want %v", i, got, want)
	}
}

func d(entries ...string) []string { return entries }

var examples = []struct {
	file string
	run  func(t *testing.T, a *asker, clk *storetest.Clock)
}{
	{"example1.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// 500 per second for database=users and database=default, each.
		a.wantD("OK [OK/0]", hits(desc("database=users"), 500))
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("database=users"))
		a.wait(0, 2*time.Millisecond) // token bucket: one token every 2ms
		a.want("OK [OK/499]", d("database=default"))
		a.want("OK [-]", d("database=other"))
		clk.Add(2 * time.Millisecond) // token bucket: back after 2ms, not at the second's end
		a.want("OK [OK/0]", d("database=users"))
	}},
	{"example2.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// 5 marketing messages a day per number, 100 messages a day per number.
		mkt, any := d("message_type=marketing", "to_number=2061111111"), d("to_number=2061111111")
		for i := range 5 {
			a.want("OK [OK/"+itoa(int64(4-i))+" OK/"+itoa(int64(99-i))+"]", mkt, any)
		}
		// Token bucket: the refused request charges neither limit.
		a.want("OVER_LIMIT [OVER_LIMIT/0 OK/95]", mkt, any)
		a.wait(0, 24*time.Hour/5)
		a.want("OK [OK/4 OK/99]", d("message_type=marketing", "to_number=2062222222"), d("to_number=2062222222"))
		a.want("OK [OK/94]", any)
	}},
	{"example3.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// 10 per second per address; 50.0.0.5 gets 0.
		for i := range 10 {
			a.want("OK [OK/"+itoa(int64(9-i))+"]", d("remote_address=50.0.0.1"))
		}
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("remote_address=50.0.0.1"))
		a.wait(0, 100*time.Millisecond)
		a.want("OK [OK/9]", d("remote_address=50.0.0.2"))
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("remote_address=50.0.0.5"))
		clk.Add(time.Hour)
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("remote_address=50.0.0.5"))
	}},
	{"example4.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// The request has two entries; the configuration's limit is at one.
		a.want("OK [-]", d("key=value", "subkey=subvalue"))
		a.want("OK [OK/299]", d("key=value"))
	}},
	{"example4b.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		a.want("OK [OK/299]", d("key=value", "subkey=subvalue"))
	}},
	{"example5.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		a.want("OK [OK/max]", d("ldap"))
		a.want("OK [OK/max OK/99]", d("ldap=x"), d("azure"))
	}},
	{"example6.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// user-a is in shadow mode at 10/s: never limited.
		for i := range 12 {
			a.want("OK [OK/"+itoa(int64(max(0, 9-i)))+"]", d("service=auth-service", "user=user-a"))
		}
		for i := range 20 {
			a.want("OK [OK/"+itoa(int64(19-i))+"]", d("service=auth-service", "user=user-b"))
		}
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("service=auth-service", "user=user-b"))
	}},
	{"example7.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// Both descriptors: 10/s, the 5/s limit is replaced and untouched.
		k1, k2 := d("key_1=value_1", "user=bkthomps"), d("key_2=value_2", "user=bkthomps")
		for i := range 10 {
			a.want("OK [- OK/"+itoa(int64(9-i))+"]", k1, k2)
		}
		a.want("OVER_LIMIT [- OVER_LIMIT/0]", k1, k2)
		a.want("OK [OK/4]", k1)
	}},
	{"example8.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		a.wantD("OK [OK/0]", hits(desc("key1=unspecified_value"), 10))
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("key1=unspecified_value"))
		a.want("OK [OK/9]", d("key1=unspecified_value2"))
		a.want("OK [OK/19]", d("key1=value1"))
	}},
	{"example9.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// value* matches value1 and value2, each with its own 20/min.
		a.wantD("OK [OK/0]", hits(desc("key1=value1"), 20))
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("key1=value1"))
		a.wait(0, 3*time.Second)
		a.want("OK [OK/19]", d("key1=value2"))
		a.want("OK [-]", d("key1=other"))
	}},
	{"example10.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		a.want("OK [OK/59]", d("route=api", "http_method=GET", "subject_id=123"))
		a.want("OK [OK/59]", d("route=web", "http_method=POST", "subject_id=456"))
		a.want("OK [OK/58]", d("route=api", "http_method=GET", "subject_id=123"))
	}},
	{"example10b.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		a.want("OK [OK/99]", d("user=alice", "action=readfile", "resource=documents"))
		a.want("OK [-]", d("user=alice", "action=write", "resource=documents"))
	}},
	{"example11.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		// files/* share one threshold of 10 an hour; files_no_share/* do not.
		a.wantD("OK [OK/5]", hits(desc("files=files/a.pdf"), 5))
		a.wantD("OK [OK/0]", hits(desc("files=files/b.csv"), 5))
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("files=files/c.txt"))
		a.wait(0, 6*time.Minute)
		a.wantD("OK [OK/0]", hits(desc("files_no_share=files_no_share/a.pdf"), 10))
		a.want("OVER_LIMIT [OVER_LIMIT/0]", d("files_no_share=files_no_share/a.pdf"))
		a.want("OK [OK/9]", d("files_no_share=files_no_share/b.csv"))
	}},
	{"example11b.yaml", func(t *testing.T, a *asker, clk *storetest.Clock) {
		a.want("OK [OK/59]", d("route=api/v1", "method=GET"))
		a.want("OK [OK/58]", d("route=api/v2", "method=GET"))
		a.want("OK [OK/59]", d("route=api/v2", "method=POST"))
	}},
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
