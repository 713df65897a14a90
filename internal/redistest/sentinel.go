package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which the sentinels of [StartSentinel]
// monitor the master.
const SentinelMaster = "rbmaster"

// SentinelDownAfter is how long the sentinels of [StartSentinel] wait for
// an unreachable master before they agree it is down and fail it over.
const SentinelDownAfter = time.Second

// Sentinel is a local Redis Sentinel setup: one master, one replica of it
// and three sentinels that monitor it (quorum 2), each process on its own
// 127.0.0.1 port with its own temp dir, persistence off. Every process is
// killed when the test ends, and dies with the test binary on Linux. Its
// methods are safe for simultaneous use.
//
// Replication is asynchronous, as in production: a write the master
// acknowledged may not have reached the replica when the master dies.
type Sentinel struct {
	// Addrs holds the sentinels' host:port, for FailoverOptions.
	Addrs []string

	mu        sync.Mutex
	data      map[string]*process // master and replica by address; nil once killed
	sentinels []*process
	clients   []*redis.Client
}

// StartSentinel starts the master, the replica (in sync before it
// returns) and three sentinels, and returns once every sentinel knows the
// master, the replica and the two other sentinels: a failover can then be
// agreed. It fails the test when redis-server or redis-sentinel cannot be
// found or started.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := serverBinary(t)
	sbin := lookBinary(t, "redis-sentinel")
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	s := &Sentinel{data: map[string]*process{}}
	t.Cleanup(s.stop) // registered after the dirs: runs before they are removed
	repl := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	master := s.startData(t, bin, dirs[0], repl...)
	_, mport, _ := net.SplitHostPort(master)
	replica := s.startData(t, bin, dirs[1], append(repl, "--replicaof", "127.0.0.1", mport)...)
	mc := s.Node(master)
	s.await(t, "the replica in sync", func(ctx context.Context) error {
		info, err := mc.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "state=online") {
			err = fmt.Errorf("replica %s not online yet", replica)
		}
		return err
	})
	for _, dir := range dirs[2:] {
		s.startSentinel(t, sbin, dir, mport)
	}
	for _, a := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		s.await(t, "sentinel "+a+" to know the replica and the other sentinels", func(ctx context.Context) error {
			reps, err := sc.Replicas(ctx, SentinelMaster).Result()
			if err != nil {
				return err
			}
			sents, err := sc.Sentinels(ctx, SentinelMaster).Result()
			if err == nil && (len(reps) != 1 || len(sents) != len(s.Addrs)-1) {
				err = fmt.Errorf("it knows %d replicas and %d other sentinels", len(reps), len(sents))
			}
			return err
		})
		sc.Close()
	}
	return s
}

// startData starts a master or replica with extra options and returns its
// address.
func (s *Sentinel) startData(t testing.TB, bin, dir string, extra ...string) string {
	t.Helper()
	var p *process
	var err error
	port := 0
	for attempt := 0; attempt < 5; attempt++ { // another process may grab the port first
		port = freePort(t, false)
		if p, err = startProcess(bin, dir, port, extra...); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: sentinel's data node: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.mu.Lock()
	s.data[addr] = p
	s.mu.Unlock()
	return addr
}

// startSentinel starts one sentinel monitoring the master on mport.
// Sentinel needs a config file it can rewrite, so its options go there.
func (s *Sentinel) startSentinel(t testing.TB, bin, dir, mport string) {
	t.Helper()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t, false)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		conf := filepath.Join(dir, "sentinel.conf")
		log := filepath.Join(dir, "sentinel-"+strconv.Itoa(port)+".log")
		text := strings.Join([]string{
			"port " + strconv.Itoa(port), "bind 127.0.0.1", "daemonize no", "protected-mode no",
			"dir " + dir, "logfile " + log,
			"sentinel monitor " + SentinelMaster + " 127.0.0.1 " + mport + " 2",
			"sentinel down-after-milliseconds " + SentinelMaster + " " + strconv.FormatInt(SentinelDownAfter.Milliseconds(), 10),
			"sentinel failover-timeout " + SentinelMaster + " 10000",
			"sentinel parallel-syncs " + SentinelMaster + " 1", "",
		}, "\n")
		if err = os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf)
		dieWithParent(cmd)
		if err = cmd.Start(); err != nil {
			t.Fatalf("redistest: start redis-sentinel: %v", err)
		}
		p := &process{cmd: cmd, done: make(chan struct{}), log: log}
		go func() { _ = cmd.Wait(); close(p.done) }()
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		err = awaitProcess(p, "redis-sentinel on port "+strconv.Itoa(port), func(ctx context.Context) error { return c.Ping(ctx).Err() })
		c.Close()
		if err == nil {
			s.mu.Lock()
			s.sentinels = append(s.sentinels, p)
			s.Addrs = append(s.Addrs, addr)
			s.mu.Unlock()
			return
		}
	}
	t.Fatalf("redistest: %v", err)
}

// FailoverOptions returns options for redis.NewFailoverClient on this
// setup, with context deadlines applied to the socket. Clients made from
// them are the caller's to close.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.Addrs, ContextTimeoutEnabled: true}
}

// Client returns a failover client (redis.NewFailoverClient) that follows
// the master the sentinels name, closed when the test ends.
func (s *Sentinel) Client() *redis.Client {
	return s.keep(redis.NewFailoverClient(s.FailoverOptions()))
}

// Node returns a plain client of the data node at addr (master or
// replica), closed when the test ends.
func (s *Sentinel) Node(addr string) *redis.Client {
	return s.keep(redis.NewClient(&redis.Options{Addr: addr}))
}

func (s *Sentinel) keep(c *redis.Client) *redis.Client {
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Master returns the address of the master, as the first sentinel names
// it.
func (s *Sentinel) Master(t testing.TB) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addrs[0]})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	hp, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		t.Fatalf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME: %v", err)
	}
	return net.JoinHostPort(hp[0], hp[1])
}

// Kill stops the data node at addr abruptly (SIGKILL), as a crash would,
// and waits for it to exit.
func (s *Sentinel) Kill(t testing.TB, addr string) {
	t.Helper()
	s.mu.Lock()
	p := s.data[addr]
	s.data[addr] = nil
	s.mu.Unlock()
	if p == nil {
		t.Fatalf("redistest: no running data node at %s", addr)
	}
	p.stop()
}

// WaitFailover waits until every sentinel names a master other than old
// and that node reports role:master, and returns its address. It fails
// the test after patience (a failover takes SentinelDownAfter and an
// election: a few seconds).
func (s *Sentinel) WaitFailover(t testing.TB, old string, patience time.Duration) string {
	t.Helper()
	var now string
	end := time.Now().Add(patience)
	for tick := time.NewTicker(10 * time.Millisecond); ; <-tick.C {
		now = s.agreed()
		if now != "" && now != old {
			c := redis.NewClient(&redis.Options{Addr: now})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			role, err := c.Do(ctx, "ROLE").Slice()
			cancel()
			c.Close()
			if err == nil && len(role) > 0 && role[0] == "master" {
				tick.Stop()
				return now
			}
		}
		if time.Now().After(end) {
			t.Fatalf("redistest: no failover from %s within %v (sentinels name %q)", old, patience, now)
		}
	}
}

// agreed returns the master every sentinel names, or "" when they differ
// or one does not answer.
func (s *Sentinel) agreed() string {
	name := ""
	for _, a := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		hp, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		cancel()
		sc.Close()
		if err != nil {
			return ""
		}
		if n := net.JoinHostPort(hp[0], hp[1]); name == "" || name == n {
			name = n
		} else {
			return ""
		}
	}
	return name
}

// await polls cond until it returns nil, failing the test after
// startTimeout.
func (s *Sentinel) await(t testing.TB, what string, cond func(ctx context.Context) error) {
	t.Helper()
	if err := awaitProcess(nil, what, cond); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// awaitProcess polls cond every 5 ms, each try bounded by 200 ms, until it
// returns nil; it gives up when p (if not nil) exits, or after
// startTimeout, when it kills p. startProcess waits with it for PING.
func awaitProcess(p *process, what string, cond func(ctx context.Context) error) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := cond(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start: %s", what, p.tail())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			if p != nil {
				p.stop()
				return fmt.Errorf("%s not ready within %v: %v; log: %s", what, startTimeout, err, p.tail())
			}
			return fmt.Errorf("%s not within %v: %v", what, startTimeout, err)
		}
	}
}

// stop closes the clients and kills every process.
func (s *Sentinel) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
	for _, p := range s.sentinels {
		p.stop()
	}
	for _, p := range s.data {
		p.stop()
	}
	s.clients, s.sentinels, s.data = nil, nil, nil
}
