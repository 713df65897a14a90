package memstore

import (
	"sync"
	"sync/atomic"

	"github.com/ratebucket/ratebucket/algo"
)

// MaxPolicies is how many distinct policies a Store tells apart. Each
// bucket records which policy it was written under as a small number in
// spare bits of its slot (so a bucket is no larger; the number travels
// through the algorithm in its state's Prev word), and the Store keeps the
// table of those numbers: about 80 bytes a policy, never shrunk. A sweep
// derives a bucket's idle time from its state and that policy. A bucket
// written under a policy beyond the first MaxPolicies is recorded as
// "unknown" (its shard keeps its idle time in a map apart), and a later
// call under another policy reads it as its own, unconverted: the one case
// in which a policy change is not exact.
const MaxPolicies = 1 << 16

// shardPolicies bounds a shard's cache of policy numbers (it is cleared
// when full): a shard looks them up under its own lock, not the table's.
const shardPolicies = 256

// policies numbers the policies buckets are written under, from 1; 0 is
// "unknown". Numbers are never reused, so a bucket's number always names
// the policy it was written under.
type policies struct {
	// tab holds policy n at index n−1. Readers load it without a lock;
	// intern appends under mu and publishes the longer slice, which
	// shares the backing array whose first elements never change.
	tab atomic.Pointer[[]algo.Policy]
	mu  sync.Mutex
	ids map[algo.Policy]int64 // guarded by mu
}

func (ps *policies) init() {
	ps.tab.Store(new([]algo.Policy))
	ps.ids = make(map[algo.Policy]int64)
}

// get returns policy number id, and whether it is known.
func (ps *policies) get(id int64) (algo.Policy, bool) {
	tab := *ps.tab.Load()
	if id < 1 || id > int64(len(tab)) {
		return algo.Policy{}, false
	}
	return tab[id-1], true
}

// id returns p's number, numbering it if it has none (0 once the table is
// full), for a caller holding sh's lock. The first few policies are
// found by a scan of the table, the rest in sh's cache, and only a policy
// new to the shard locks the table.
func (ps *policies) id(sh *shard, p algo.Policy) int64 {
	tab := *ps.tab.Load()
	for i := range min(len(tab), 4) {
		if tab[i] == p {
			return int64(i + 1)
		}
	}
	if id, ok := sh.pols[p]; ok {
		return id
	}
	id := ps.intern(p)
	if id > 0 {
		if sh.pols == nil || len(sh.pols) >= shardPolicies {
			sh.pols = make(map[algo.Policy]int64)
		}
		sh.pols[p] = id
	}
	return id
}

// intern returns p's number, numbering it if it has none and the table
// has room, else 0.
func (ps *policies) intern(p algo.Policy) int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if id, ok := ps.ids[p]; ok {
		return id
	}
	tab := *ps.tab.Load()
	if len(tab) >= MaxPolicies {
		return 0
	}
	tab = append(tab, p) // in place while there is room: readers see only up to their length
	ps.tab.Store(&tab)
	ps.ids[p] = int64(len(tab))
	return int64(len(tab))
}

// is reports whether policy number id is p's.
func (ps *policies) is(id int64, p algo.Policy) bool {
	tab := *ps.tab.Load()
	return uint64(id-1) < uint64(len(tab)) && tab[id-1] == p
}

// load returns the state of the bucket in slot sl (nil: none, a full
// bucket) for a call under p at now, for a token-bucket Store, with sh
// locked: as stored when it was written under p, else converted to p by
// algo.TokenBucket.Rebase under the Store's rule. Its Prev is p's number,
// which the token bucket's operations carry through to the state the
// caller stores, so the call that converts a bucket keeps it converted. A
// conversion that fails (p or now invalid) returns the state as stored,
// for the operation to report the error and store nothing.
func (s *Store) load(sh *shard, sl *slot[bucket], p algo.Policy, now int64) algo.State {
	if sl != nil && s.pols.is(sl.v.policy(), p) {
		return sl.v.state() // the usual case: the bucket's own policy
	}
	return s.convert(sh, sl, p, now)
}

// convert is load's rarer part: a new bucket, or one written under
// another policy.
func (s *Store) convert(sh *shard, sl *slot[bucket], p algo.Policy, now int64) algo.State {
	id := s.pols.id(sh, p)
	if sl == nil {
		return algo.State{Prev: id}
	}
	st := sl.v.state()
	from, known := s.pols.get(st.Prev)
	if !known { // written while the table was full: read as p's
		st.Prev = id
		return st
	}
	r, err := algo.TokenBucket{}.Rebase(from, p, st, now, s.rule)
	if err != nil {
		return st
	}
	r.Prev = id
	return r
}

// rebased reports whether the state st that load returned for the bucket
// in slot sl is a conversion that the call must store even if its
// operation writes nothing otherwise.
func rebased(sl *slot[bucket], st algo.State) bool { return sl != nil && sl.v.policy() != st.Prev }
