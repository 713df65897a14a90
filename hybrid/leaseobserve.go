package hybrid

import "github.com/ratebucket/ratebucket/observe"

// leaseBatch reports b, a grant or a give-back of e's batch, with the
// admissions from the batch since e's last report; called with e's shard
// locked. Without an Observer it does nothing, and e.spent just grows
// (wrapping at 2^32, unread; spend reports before it wraps otherwise).
func (o observer) leaseBatch(e *lease, b observe.LeaseBatch) {
	if o.o == nil {
		return
	}
	b.Store, b.Local, e.spent = o.name, int64(e.spent), 0
	o.o.ObserveLeaseBatch(b)
}

// spentOut reports the admissions from e's batch since its last report
// when the batch ended spent to its last token, which nothing gives back.
func (o observer) spentOut(e *lease) {
	if e.spent > 0 {
		o.leaseBatch(e, observe.LeaseBatch{})
	}
}
