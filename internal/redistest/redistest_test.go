package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/internal/leaktest"
	"github.com/redis/go-redis/v9"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStartServesAndStops(t *testing.T) {
	var pid int
	var addr string
	t.Run("server", func(t *testing.T) {
		srv := Start(t)
		addr = srv.Addr
		c := srv.Client()
		if err := c.Set(ctx(t), Prefix(t)+"k", "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got := c.ConfigGet(ctx(t), "save").Val()["save"]; got != "" {
			t.Errorf("save = %q, want persistence off", got)
		}
		if srv.External() {
			t.Skip("external server: cannot check the process")
		}
		if !strings.HasPrefix(srv.Addr, "127.0.0.1:") {
			t.Errorf("Addr = %q, want loopback", srv.Addr)
		}
		pid = srv.proc.cmd.Process.Pid
	})
	if pid == 0 {
		return
	}
	// After the subtest's cleanup the process is gone and the port is closed.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("redis-server pid %d still exists after cleanup (kill 0: %v)", pid, err)
	}
	if c, err := dialOnce(addr); err == nil {
		c.Close()
		t.Errorf("port %s still accepts connections after cleanup", addr)
	}
}

// TestLaunchServesAndStops: Launch, the starter for programs, serves on
// loopback with persistence off, and Stop leaves no process or port.
func TestLaunchServesAndStops(t *testing.T) {
	l, err := Launch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: l.Addr})
	defer c.Close()
	if got := c.ConfigGet(ctx(t), "save").Val()["save"]; got != "" || !strings.HasPrefix(l.Addr, "127.0.0.1:") {
		t.Errorf("save = %q at %s, want persistence off on loopback", got, l.Addr)
	}
	pid := l.proc.cmd.Process.Pid
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("redis-server pid %d still exists after Stop (kill 0: %v)", pid, err)
	}
	if c, err := dialOnce(l.Addr); err == nil {
		c.Close()
		t.Errorf("port %s still accepts connections after Stop", l.Addr)
	}
}

func TestRestartEmptiesAndKeepsPort(t *testing.T) {
	srv := Start(t)
	c := srv.Client()
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr
	srv.Kill(t)
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING succeeded on a killed server")
	}
	srv.Revive(t)
	if srv.Addr != addr {
		t.Fatalf("Addr changed from %s to %s", addr, srv.Addr)
	}
	if n := c.Exists(ctx(t), "k").Val(); n != 0 {
		t.Errorf("key survived a restart: exists = %d", n)
	}
	srv.Restart(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Errorf("PING after Restart: %v", err)
	}
}

func TestPrefixUnique(t *testing.T) {
	a, b := Prefix(t), Prefix(t)
	if a == b {
		t.Errorf("Prefix returned %q twice", a)
	}
	if strings.ContainsAny(a, "{} ") {
		t.Errorf("Prefix %q contains braces or spaces", a)
	}
}

func TestMissingBinaryFailsWithInstallHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("REDIS_URL", "")
	ft := &fakeT{TB: t}
	func() {
		defer func() { _ = recover() }()
		Start(ft)
	}()
	if !ft.failed || !strings.Contains(ft.msg, "apt-get install redis-server redis-tools") {
		t.Errorf("Start without redis-server: failed=%v msg=%q", ft.failed, ft.msg)
	}
}

func TestCluster(t *testing.T) {
	cl := StartCluster(t)
	if len(cl.Addrs) != ClusterSize {
		t.Fatalf("Addrs = %v", cl.Addrs)
	}
	c := cl.Client()
	// Keys in different slots land on different masters and all work.
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("%sk%d", Prefix(t), i)
		if err := c.Set(ctx(t), k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		slot := c.ClusterKeySlot(ctx(t), k).Val()
		shards := c.ClusterSlots(ctx(t)).Val()
		for _, s := range shards {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				masters[s.Nodes[0].Addr] = true
			}
		}
	}
	if len(masters) != ClusterSize {
		t.Errorf("30 keys reached %d masters, want %d", len(masters), ClusterSize)
	}
}

// fakeT records Fatalf instead of ending the test; Fatalf panics to stop
// the caller, as runtime.Goexit would.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic("fatal")
}

func dialOnce(addr string) (interface{ Close() error }, error) {
	return net.DialTimeout("tcp", addr, 200*time.Millisecond)
}

// TestMain fails the run if a goroutine (a process waiter, a client) is
// left behind; go-redis's dial prober, which notices a client's Close only
// between its once-a-second probes of a killed server, excepted.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// TestClusterFailover: with replicas, killing a master gets its replica
// promoted (WaitOK returns once it is), the data written before the kill
// and replicated survives, and the revived node rejoins as a replica of
// the new master, copying its data.
func TestClusterFailover(t *testing.T) {
	cl := StartClusterOpts(t, ClusterConfig{Replicas: 1, NodeTimeout: time.Second})
	if len(cl.Addrs) != 2*ClusterSize {
		t.Fatalf("Addrs = %v, want %d nodes", cl.Addrs, 2*ClusterSize)
	}
	if got := cl.Masters(t); len(got) != ClusterSize || !slices.Equal(got, sorted(cl.Addrs[:ClusterSize])) {
		t.Fatalf("Masters = %v, want the first %d of %v", got, ClusterSize, cl.Addrs)
	}
	c := cl.Client()
	k := Prefix(t) + "k"
	if err := c.Set(ctx(t), k, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	node, err := c.MasterForKey(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := node.Wait(ctx(t), 1, time.Second).Result(); n != 1 || err != nil {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	start := time.Now()
	old := cl.KillMasterOf(t, k)
	if old != node.Options().Addr {
		t.Fatalf("killed %s; the client says %s serves %s", old, node.Options().Addr, k)
	}
	cl.WaitOK(t)
	promoted := cl.MasterOf(t, k)
	t.Logf("replica %s promoted in %v after the kill of %s", promoted, time.Since(start).Round(time.Millisecond), old)
	if promoted == old || !slices.Contains(cl.Addrs, promoted) {
		t.Fatalf("master of %s after the failover = %s (killed %s)", k, promoted, old)
	}
	get := func(addr string) string {
		a := adminClient(addr)
		defer a.Close()
		if err := a.ReadOnly(ctx(t)).Err(); err != nil {
			t.Fatal(err)
		}
		return a.Get(ctx(t), k).Val()
	}
	if v := get(promoted); v != "v" {
		t.Fatalf("GET on the promoted replica = %q, want the replicated value", v)
	}

	cl.Revive(t, old)
	cl.WaitOK(t)
	if m := cl.MasterOf(t, k); m != promoted {
		t.Errorf("after the revival the master of %s is %s, want %s still", k, m, promoted)
	}
	a := adminClient(old)
	defer a.Close()
	repl := a.Info(ctx(t), "replication").Val()
	_, port, _ := net.SplitHostPort(promoted)
	if !strings.Contains(repl, "role:slave") || !strings.Contains(repl, "master_port:"+port) {
		t.Errorf("the revived node is not a replica of %s:\n%s", promoted, repl)
	}
	if v := get(old); v != "v" {
		t.Errorf("GET on the revived replica = %q, want the value copied from the new master", v)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
