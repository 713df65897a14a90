package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterSize is how many masters StartCluster starts.
const ClusterSize = 3

// DefaultNodeTimeout is the cluster-node-timeout of a cluster started
// with a zero [ClusterConfig.NodeTimeout].
const DefaultNodeTimeout = 5 * time.Second

// ClusterConfig shapes the cluster [StartClusterOpts] starts. The zero
// value is [StartCluster]'s: three masters, no replicas, a 5 s node
// timeout.
type ClusterConfig struct {
	// Masters is how many masters share the 16384 slots; 0 means
	// ClusterSize.
	Masters int
	// Replicas is how many replicas each master gets; 0 means none.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before the cluster fails it and promotes one of its
	// replicas. 0 means DefaultNodeTimeout; it is rounded down to a
	// whole millisecond.
	NodeTimeout time.Duration
}

// Cluster is a local Redis Cluster, each node in its own temp dir with
// persistence off, or the cluster named by REDIS_CLUSTER_ADDRS. Its methods
// are safe for simultaneous use.
//
// Nodes can be killed ([Cluster.Kill], kill -9 as a crash would) and
// started again ([Cluster.Revive]). A revived node has its cluster
// configuration (nodes.conf, which Redis writes whatever the persistence
// settings) but no data. If one of its replicas was promoted meanwhile it
// rejoins as a replica of the new master and copies its data by a full
// sync; otherwise (no replica, or revived before the node timeout failed
// it) it serves its slots again as a master, empty: every bucket in them
// comes back full. A master also answers CLUSTERDOWN for about 2 s after
// it starts (Redis's rejoin delay) before it accepts writes.
type Cluster struct {
	// Addrs holds every node's host:port: for StartCluster, the masters;
	// with replicas, the masters of the new cluster first, then the
	// replicas. A failover changes the roles, not Addrs: ask
	// [Cluster.MasterOf] or [Cluster.Masters].
	Addrs []string

	external bool
	mu       sync.Mutex
	nodes    map[string]*clusterNode // by address; nil for an external cluster
	clients  []*redis.ClusterClient
}

// clusterNode is one local node: what it takes to start it again.
type clusterNode struct {
	port int
	dir  string
	args []string // cluster options for startProcess
	proc *process // nil while killed
}

// StartCluster starts three redis-server processes with cluster mode on,
// joins them with `redis-cli --cluster create` (16384 slots split between
// them), and waits until every node reports cluster_state:ok. The cluster
// lives until the test ends. With REDIS_CLUSTER_ADDRS set it uses that
// cluster instead (not emptied: use [Prefix]).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterOpts(t, ClusterConfig{})
}

// StartClusterOpts is [StartCluster] for a cluster of another shape, such
// as one with replicas and a short node timeout for failover tests. It
// returns once every node reports cluster_state:ok and every replica is in
// sync with its master ([Cluster.WaitOK]). With REDIS_CLUSTER_ADDRS set it
// uses that cluster, whatever its shape.
func StartClusterOpts(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	cl := &Cluster{}
	if env := os.Getenv("REDIS_CLUSTER_ADDRS"); env != "" {
		t.Cleanup(cl.stop)
		cl.Addrs, cl.external = strings.Split(env, ","), true
		cl.WaitOK(t)
		return cl
	}
	if cfg.Masters == 0 {
		cfg.Masters = ClusterSize
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = DefaultNodeTimeout
	}
	bin := serverBinary(t)
	cli := lookBinary(t, "redis-cli")
	dirs := make([]string, cfg.Masters*(1+cfg.Replicas))
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	cl.nodes = map[string]*clusterNode{}
	t.Cleanup(cl.stop) // registered after the dirs: runs before they are removed
	for i, dir := range dirs {
		n := &clusterNode{dir: dir, args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10),
			"--repl-diskless-sync-delay", "0", // a replica syncs at once, not 5 s later
		}}
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			n.port = freePort(t, true)
			if n.proc, err = startProcess(bin, dir, n.port, n.args...); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: cluster node %d: %v", i, err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
		cl.mu.Lock()
		cl.nodes[addr] = n
		cl.mu.Unlock()
		cl.Addrs = append(cl.Addrs, addr)
	}
	// redis-cli makes the first Masters nodes masters when all share a host.
	args := append([]string{"--cluster", "create"}, cl.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	cl.WaitOK(t)
	return cl
}

// Client returns a new cluster client, closed when the test ends.
func (cl *Cluster) Client() *redis.ClusterClient {
	c := redis.NewClusterClient(cl.Options())
	cl.mu.Lock()
	cl.clients = append(cl.clients, c)
	cl.mu.Unlock()
	return c
}

// Options returns fresh options for a client of the cluster, for tests
// that need their own settings. Clients made from it are the caller's to
// close.
func (cl *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: append([]string(nil), cl.Addrs...)}
}

// Kill stops the node at addr abruptly (SIGKILL), as a crash would, and
// waits for it to exit. It skips the test on an external cluster.
func (cl *Cluster) Kill(t testing.TB, addr string) {
	t.Helper()
	n := cl.node(t, addr)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n.proc.stop()
	n.proc = nil
}

// KillMasterOf kills the master that serves key's slot and returns its
// address.
func (cl *Cluster) KillMasterOf(t testing.TB, key string) string {
	t.Helper()
	addr := cl.MasterOf(t, key)
	cl.Kill(t, addr)
	return addr
}

// Revive starts the killed node at addr again on the same port, with its
// cluster configuration and no data (see [Cluster]), and waits until it
// answers PING, not until the cluster has taken it back: call
// [Cluster.WaitOK] for that. It does nothing if the node is running.
func (cl *Cluster) Revive(t testing.TB, addr string) {
	t.Helper()
	n := cl.node(t, addr)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if n.proc == nil {
		n.proc = restart(t, n.dir, n.port, n.args...)
	}
}

// MasterOf returns the address of the master that serves key's slot, as
// a running node's CLUSTER SLOTS says.
func (cl *Cluster) MasterOf(t testing.TB, key string) string {
	t.Helper()
	var addr string
	cl.query(t, func(ctx context.Context, c *redis.Client) error {
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return err
		}
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			return err
		}
		addr = masterOf(slots, int(slot))
		if addr == "" {
			return fmt.Errorf("slot %d has no master", slot)
		}
		return nil
	})
	return addr
}

// Masters returns the addresses of the masters that serve slots, sorted,
// as a running node's CLUSTER SLOTS says.
func (cl *Cluster) Masters(t testing.TB) []string {
	t.Helper()
	var masters []string
	cl.query(t, func(ctx context.Context, c *redis.Client) error {
		slots, err := c.ClusterSlots(ctx).Result()
		for _, s := range slots {
			if len(s.Nodes) > 0 && !slices.Contains(masters, s.Nodes[0].Addr) {
				masters = append(masters, s.Nodes[0].Addr)
			}
		}
		slices.Sort(masters)
		return err
	})
	return masters
}

// masterOf returns the master of slot in a CLUSTER SLOTS reply, or "".
func masterOf(slots []redis.ClusterSlot, slot int) string {
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}

// query runs fn on a client of the first running node, failing the test
// when it returns an error.
func (cl *Cluster) query(t testing.TB, fn func(context.Context, *redis.Client) error) {
	t.Helper()
	live := cl.live()
	if len(live) == 0 {
		t.Fatalf("redistest: no cluster node is running")
	}
	c := adminClient(live[0])
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := fn(ctx, c); err != nil {
		t.Fatalf("redistest: cluster node %s: %v", live[0], err)
	}
}

// WaitOK waits until the cluster is whole again, or fails the test after
// a bounded wait: every running node reports cluster_state:ok with all
// slots assigned and knows every node, all of them agree on which master
// serves each slot and none of those masters is a killed node, and every
// running replica is in sync with its master. Right after a Kill the
// cluster still reports ok (until the node timeout fails the node), so
// WaitOK after a Kill returns once a replica has been promoted.
func (cl *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * startTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cl.whole()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok within %v: %v", 2*startTimeout, err)
		}
		<-tick.C
	}
}

// whole returns nil when the cluster is as WaitOK wants it, else what is
// not yet so.
func (cl *Cluster) whole() error {
	live := cl.live()
	dead := cl.dead()
	var want string // the slot map every node must agree on
	for _, addr := range live {
		err := func() error {
			c := adminClient(addr)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			for _, s := range []string{"cluster_state:ok", "cluster_slots_ok:16384", fmt.Sprintf("cluster_known_nodes:%d", len(cl.Addrs))} {
				if !strings.Contains(info, s) {
					return fmt.Errorf("CLUSTER INFO has no %s: %s", s, info)
				}
			}
			slots, err := c.ClusterSlots(ctx).Result()
			if err != nil {
				return err
			}
			var m strings.Builder
			slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
			for _, s := range slots {
				if len(s.Nodes) == 0 || slices.Contains(dead, s.Nodes[0].Addr) {
					return fmt.Errorf("slots %d-%d have no running master: %v", s.Start, s.End, s.Nodes)
				}
				fmt.Fprintf(&m, "%d-%d:%s ", s.Start, s.End, s.Nodes[0].Addr)
			}
			if want == "" {
				want = m.String()
			} else if m.String() != want {
				return fmt.Errorf("sees slots %s; %s sees %s", m.String(), live[0], want)
			}
			repl, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica not in sync: %s", repl)
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
	}
	return nil
}

// live returns the addresses of the running nodes, in Addrs order.
func (cl *Cluster) live() []string { return cl.filter(true) }

// dead returns the addresses of the killed nodes.
func (cl *Cluster) dead() []string { return cl.filter(false) }

func (cl *Cluster) filter(running bool) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []string
	for _, addr := range cl.Addrs {
		n := cl.nodes[addr]
		if up := n == nil || n.proc != nil; up == running { // an external node is up
			out = append(out, addr)
		}
	}
	return out
}

// node returns the local node at addr, skipping the test on an external
// cluster and failing it for an unknown address.
func (cl *Cluster) node(t testing.TB, addr string) *clusterNode {
	t.Helper()
	if cl.external {
		t.Skip("redistest: REDIS_CLUSTER_ADDRS names an external cluster; this test needs to stop and start local nodes")
	}
	cl.mu.Lock()
	n := cl.nodes[addr]
	cl.mu.Unlock()
	if n == nil {
		t.Fatalf("redistest: %s is not a node of this cluster (%v)", addr, cl.Addrs)
	}
	return n
}

// adminClient is a client of one node that never retries, for polling.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
}

func (cl *Cluster) stop() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, c := range cl.clients {
		c.Close()
	}
	cl.clients = nil
	for _, n := range cl.nodes {
		n.proc.stop()
		n.proc = nil
	}
}
