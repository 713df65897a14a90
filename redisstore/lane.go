package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// laneIdle is how long a cluster lane may go without a pipeline before the
// next new lane drops it: the lane of a node that is no longer a master
// (failed over, or gone) is not kept for ever, and that of a master with
// no traffic for a while is made again at its next call.
const laneIdle = time.Minute

// lane is a queue of calls and its writers. A pipeliner has one lane, or
// on a cluster one per master (on a Ring one per shard), so that a
// pipeline never holds two nodes' calls: go-redis runs a pipeline's share
// for each node at once and returns when the last is done, so a call to a
// healthy master sent with calls to a dead one waited for them, up to its
// deadline. The pipeliner's mu guards q and writers.
type lane struct {
	node    *redis.Client // the node's client; nil for the one lane
	slots   chan struct{} // one per queued call: the queue's bound
	q       []*call
	writers int
	used    atomic.Int64 // UnixNano when a writer last took a batch
}

// laneOf returns the lane of the node c's first key goes to, making it if
// it is new: on a cluster the master that holds its slot in the client's
// slot map (MasterForKey: the node go-redis would send c to), on a Ring
// the key's shard. The map is go-redis's, kept up to date as go-redis
// keeps it (on MOVED, on the failover's reloads, every
// ClusterStateReloadInterval). When the map changes while c waits in its
// lane, go-redis sends c where the map then says, following MOVED and ASK
// as for any command: c leaves its lane once and is written once, and
// only its lane's calls can share its pipeline.
//
// A cluster client loads its slot map on its first call, from the
// caller's goroutine and under the caller's context; a timed call bounds
// that wait by its deadline. A call that cannot be routed (no node of the
// cluster answered, every shard of a Ring is down) was never sent: its
// error matches ErrNotSent.
func (p *pipeliner) laneOf(c *call) (*lane, error) {
	ctx := c.ctx
	if c.timed && !p.routed.Load() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.dl)
		defer cancel()
	}
	node, err := p.route(ctx, c.keys[0])
	if err != nil {
		return nil, connFailed(ctx.Err(), err)
	}
	if !p.routed.Load() {
		p.routed.Store(true)
	}
	if ls := p.lanes.Load(); ls != nil {
		for _, l := range *ls {
			if l.node == node {
				return l, nil
			}
		}
	}
	return p.addLane(node), nil
}

// addLane returns node's lane, adding it to the list, from which it drops
// the lanes that hold no call, run no writer and took no batch within
// laneIdle.
func (p *pipeliner) addLane(node *redis.Client) *lane {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var ls []*lane
	if old := p.lanes.Load(); old != nil {
		for _, l := range *old {
			if l.node == node {
				return l // another call added it
			}
			if len(l.q) > 0 || l.writers > 0 || now.Sub(time.Unix(0, l.used.Load())) < laneIdle {
				ls = append(ls, l)
			}
		}
	}
	l := &lane{node: node, slots: make(chan struct{}, p.maxQueued)}
	l.used.Store(now.UnixNano())
	ls = append(ls, l)
	p.lanes.Store(&ls)
	return l
}
