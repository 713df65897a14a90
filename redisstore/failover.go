package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// reloadSpacing is the least time between two cluster state reloads that
// a Store asks for: a storm of failed calls asks for at most one reload
// per spacing, five CLUSTER SLOTS a second per process at most. go-redis
// itself waits 200 ms after a reload before it starts another, so a
// shorter spacing would gain nothing.
const reloadSpacing = 200 * time.Millisecond

// failover has a *redis.ClusterClient reload its cluster state when a call
// fails in a way that says the node it was routed to may be gone.
//
// go-redis v9.23 reloads the state on MOVED and ASK, on READONLY for
// single commands, and when the state is older than
// ClusterStateReloadInterval (60 s by default), but not on connection
// errors (go-redis issue #3979). After a master dies and its replica is
// promoted, the client keeps routing the dead master's slots to it, so a
// third of the keys of a three-master cluster fail until the interval
// runs out: ClusterClient.process returns a NoRetry command's dial error
// without a reload and re-picks the same stale master for others, and
// processPipeline re-maps a batch that failed to get a connection onto
// the same stale state (see the package documentation, # Failover).
//
// failover starts no goroutine; ReloadState is asynchronous in go-redis
// (clusterStateHolder.LazyReload: one reload at a time, then a 200 ms
// cooldown), whose goroutine ends on its own after the reload.
type failover struct {
	rdb     *redis.ClusterClient
	next    atomic.Int64 // UnixNano before which no reload is asked
	reloads atomic.Int64 // reloads asked, for tests
}

// newFailover returns the failover of a cluster client, or nil (which
// does nothing) for any other client.
func newFailover(c redis.UniversalClient) *failover {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	return &failover{rdb: cc}
}

// check asks for a reload when err says a node may be gone, at most once
// per reloadSpacing. It is cheap when err is nil or f is nil.
func (f *failover) check(err error) {
	if f == nil || err == nil || !nodeLost(err) {
		return
	}
	now := time.Now().UnixNano()
	next := f.next.Load()
	if now < next || !f.next.CompareAndSwap(next, now+int64(reloadSpacing)) {
		return
	}
	f.reloads.Add(1)
	f.rdb.ReloadState(context.Background())
}

// checkCalls is check for each call of a pipeline.
func (f *failover) checkCalls(calls []*call) {
	if f == nil {
		return
	}
	for _, c := range calls {
		if c.cmd != nil {
			f.check(c.cmd.Err())
		}
	}
}

// nodeLost reports whether err, the error of a command go-redis was given
// to send, says the node it went to may be gone: any dial error (refused,
// timed out, no route), a connection reset, closed or broken mid-call, a
// socket timeout (a partitioned node answers nothing), or the command's
// deadline passing before its reply. The last matters for pipelines:
// go-redis retries the dial of a dead node's share of a pipeline
// (MaxRedirects times, each of DialerRetries dials 100 ms apart), and when
// that outlasts the callers' deadlines every command of the pipeline ends
// with context.DeadlineExceeded, not the dial error. A reply from Redis is
// not (the node is up; MOVED is go-redis's own business), nor a cancelled
// context, a closed client or an exhausted pool (all local).
func nodeLost(err error) bool {
	var op *net.OpError
	var ne net.Error // a socket or dial timeout, context.DeadlineExceeded
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &op) && op.Op == "dial" ||
		errors.As(err, &ne) && ne.Timeout()
}
