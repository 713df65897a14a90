// Package redistest runs real Redis servers for tests: a standalone
// redis-server on a free loopback port ([Start]) and a local Redis Cluster of
// three masters ([StartCluster]), or of another shape, with replicas and a
// short node timeout for failover tests ([StartClusterOpts]). Nothing is
// mocked: tests talk to the same server binary production uses.
//
// Servers and cluster nodes can be killed (SIGKILL, as a crash would) and
// started again on the same port, empty, as a server with persistence off
// comes back from a crash ([Server.Restart], [Cluster.Kill],
// [Cluster.Revive]); [Cluster.WaitOK] waits until a cluster has promoted a
// replica or taken a node back.
//
// Each server lives in its own t.TempDir(), with persistence off and the
// DEBUG command allowed from loopback (DEBUG SLEEP makes it slow), and is
// killed (and waited for) by t.Cleanup. On Linux the server also gets a
// parent-death signal, so a test binary that panics or is killed leaves no
// redis-server behind.
//
// When REDIS_URL is set (redis://host:port/db), Start uses that server
// instead of starting one. It is a user's server: nothing here flushes it,
// so tests must keep to keys under a unique [Prefix]. Likewise
// REDIS_CLUSTER_ADDRS (host:port,host:port,...) names an existing cluster
// for StartCluster.
//
// When redis-server is not installed the test fails (it does not skip),
// with a message saying what to install:
//
//	apt-get install redis-server redis-tools
//
// Typical use:
//
//	srv := redistest.Start(t)
//	rdb := srv.Client() // closed when the test ends
//	prefix := redistest.Prefix(t)
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one standalone Redis server: started by [Start] on a free
// 127.0.0.1 port, or the external server named by REDIS_URL. Its methods are
// safe for simultaneous use.
type Server struct {
	// Addr is the server's host:port.
	Addr string

	opts     *redis.Options // template for Client
	external bool
	dir      string

	mu      sync.Mutex
	proc    *process // nil while killed
	clients []*redis.Client
}

// Start returns a running, empty Redis server that lives until the test
// ends, or the server named by REDIS_URL (not emptied: use [Prefix]). It
// fails the test when redis-server cannot be found or started.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("redistest: REDIS_URL: %v", err)
		}
		s.Addr, s.opts, s.external = opts.Addr, opts, true
		t.Cleanup(s.closeClients)
		s.ping(t)
		return s
	}
	bin := serverBinary(t)
	s.dir = t.TempDir()
	var err error
	for attempt := 0; attempt < 5; attempt++ { // another process may grab the port first
		port := freePort(t, false)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if s.proc, err = startProcess(bin, s.dir, port); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.opts = &redis.Options{Addr: s.Addr}
	t.Cleanup(func() {
		s.closeClients()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.proc.stop()
		s.proc = nil
	})
	return s
}

// Launched is a redis-server started by [Launch]. Stop it with Stop.
type Launched struct {
	// Addr is the server's 127.0.0.1:port.
	Addr string
	proc *process
}

// Launch is [Start] for programs, which have no testing.TB: it starts
// redis-server (from PATH) on a free 127.0.0.1 port with its files in dir,
// persistence off, and waits until it answers PING. The server dies with
// this process on Linux. The bench module's redisbench uses it.
func Launch(dir string) (*Launched, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found (apt-get install redis-server redis-tools): %w", err)
	}
	for attempt := 0; attempt < 5; attempt++ { // another process may grab the port first
		var l net.Listener
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("redistest: no free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		var p *process
		if p, err = startProcess(bin, dir, port); err == nil {
			return &Launched{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), proc: p}, nil
		}
	}
	return nil, fmt.Errorf("redistest: %w", err)
}

// Stop kills the server and waits for it to exit. It always returns nil.
func (l *Launched) Stop() error {
	l.proc.stop()
	return nil
}

// Options returns a fresh copy of the options Client uses, for tests that
// need their own settings (timeouts, retries). Clients made from it are the
// caller's to close.
func (s *Server) Options() *redis.Options {
	o := *s.opts
	return &o
}

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.Options())
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// External reports whether the server came from REDIS_URL. Kill, Revive and
// Restart skip the test on an external server.
func (s *Server) External() bool { return s.external }

// Kill stops the server abruptly (SIGKILL), as a crash would, and waits for
// it to exit. Clients get connection errors until [Server.Revive].
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.local(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop()
		s.proc = nil
	}
}

// Revive starts a killed server again on the same port, empty (there is no
// persistence), and waits until it answers PING. It does nothing if the
// server is running.
func (s *Server) Revive(t testing.TB) {
	t.Helper()
	s.local(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return
	}
	_, portStr, _ := net.SplitHostPort(s.Addr)
	port, _ := strconv.Atoi(portStr)
	s.proc = restart(t, s.dir, port)
}

// restart starts redis-server again on port with its files in dir and
// extra arguments, trying again for a while: another process may hold the
// port for a moment. It fails the test when the server does not start.
func restart(t testing.TB, dir string, port int, extra ...string) *process {
	t.Helper()
	bin := serverBinary(t)
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		p, err := startProcess(bin, dir, port, extra...)
		if err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: restart on port %d: %v", port, err)
		}
		<-tick.C
	}
}

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill(t)
	s.Revive(t)
}

func (s *Server) local(t testing.TB) {
	t.Helper()
	if s.external {
		t.Skip("redistest: REDIS_URL names an external server; this test needs to stop and start a local one")
	}
}

func (s *Server) ping(t testing.TB) {
	t.Helper()
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: PING %s: %v", s.Addr, err)
	}
}

func (s *Server) closeClients() {
	s.mu.Lock()
	cs := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Prefix returns a key prefix unique to this test run, such as
// "rbtest:TestTake:3f9a1c2e:", so tests can share a server (REDIS_URL)
// without touching each other's keys. It contains no hash-tag braces.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("{", "_", "}", "_", " ", "_", "/", ".").Replace(t.Name())
	return "rbtest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// serverBinary finds redis-server or fails the test saying what to install.
func serverBinary(t testing.TB) string {
	t.Helper()
	return lookBinary(t, "redis-server")
}

func lookBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		ci := ""
		if os.Getenv("CI") != "" {
			ci = " (.ci/run installs it when absent: check that step)"
		}
		t.Fatalf("redistest: %s not found in PATH: install it with `apt-get install redis-server redis-tools`, or set REDIS_URL to a server to use%s", name, ci)
	}
	return p
}

// freePort returns a loopback port that was free a moment ago. With bus set
// it also checks port+10000, which Redis Cluster uses for its bus.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: no free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port
		}
		if port+10000 < 65536 {
			if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
				l2.Close()
				l.Close()
				return port
			}
		}
		l.Close()
	}
	t.Fatalf("redistest: no free port pair for a cluster node")
	return 0
}

// process is one running redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	log  string
}

// startProcess runs redis-server on port with its files in dir and waits
// until it answers PING. extra arguments are appended (cluster options).
func startProcess(bin, dir string, port int, extra ...string) (*process, error) {
	logPath := filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log")
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", logPath,
		"--daemonize", "no", "--protected-mode", "no",
		"--enable-debug-command", "local", // DEBUG SLEEP makes a server slow
	}, extra...)
	cmd := exec.Command(bin, args...)
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); close(p.done) }()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	if err := awaitProcess(p, "redis-server on port "+strconv.Itoa(port), func(ctx context.Context) error { return c.Ping(ctx).Err() }); err != nil {
		return nil, err
	}
	return p, nil
}

// stop kills the process and waits for it to exit.
func (p *process) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail returns the end of the server's log, for failure messages.
func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
