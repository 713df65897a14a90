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

// ClusterSize is how many masters StartCluster starts.
const ClusterSize = 3

// Cluster is a local Redis Cluster of [ClusterSize] masters and no
// replicas, each in its own temp dir, or the cluster named by
// REDIS_CLUSTER_ADDRS. Its methods are safe for simultaneous use.
type Cluster struct {
	// Addrs holds the masters' host:port addresses.
	Addrs []string

	mu      sync.Mutex
	procs   []*process
	clients []*redis.ClusterClient
}

// StartCluster starts three redis-server processes with cluster mode on,
// joins them with `redis-cli --cluster create` (16384 slots split between
// them), and waits until every node reports cluster_state:ok. The cluster
// lives until the test ends. With REDIS_CLUSTER_ADDRS set it uses that
// cluster instead (not emptied: use [Prefix]).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cl := &Cluster{}
	if env := os.Getenv("REDIS_CLUSTER_ADDRS"); env != "" {
		t.Cleanup(cl.stop)
		cl.Addrs = strings.Split(env, ",")
		cl.waitOK(t)
		return cl
	}
	bin := serverBinary(t)
	cli := lookBinary(t, "redis-cli")
	dirs := make([]string, ClusterSize)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	t.Cleanup(cl.stop) // registered after the dirs: runs before they are removed
	for i, dir := range dirs {
		var p *process
		var err error
		var port int
		for attempt := 0; attempt < 5; attempt++ {
			port = freePort(t, true)
			p, err = startProcess(bin, dir, port,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", "5000")
			if err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: cluster node %d: %v", i, err)
		}
		cl.mu.Lock()
		cl.procs = append(cl.procs, p)
		cl.mu.Unlock()
		cl.Addrs = append(cl.Addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	args := append([]string{"--cluster", "create"}, cl.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	cl.waitOK(t)
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

// waitOK polls every node until CLUSTER INFO says cluster_state:ok and all
// slots are assigned, or fails the test after a bounded wait.
func (cl *Cluster) waitOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * startTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, addr := range cl.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		var last string
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := c.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_ok:16384") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(cl.Addrs))) {
				break
			}
			last = fmt.Sprint(info, err)
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("redistest: cluster node %s not ok within %v: %s", addr, 2*startTimeout, last)
			}
			<-tick.C
		}
		c.Close()
	}
}

func (cl *Cluster) stop() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, c := range cl.clients {
		c.Close()
	}
	cl.clients = nil
	for _, p := range cl.procs {
		p.stop()
	}
	cl.procs = nil
}
