package algo

import (
	"fmt"
)

// ChangeRule says what a live bucket keeps when its policy changes: see
// [TokenBucket.Rebase]. The zero value is [KeepTokens].
type ChangeRule uint8

const (
	// KeepTokens keeps the tokens the bucket holds at the change, capped
	// at the new capacity, and refills them at the new rate from then on.
	// It is the default.
	KeepTokens ChangeRule = iota
	// Proportional keeps the same fraction of a full bucket (bucket4j's
	// "proportionally"): a bucket half full stays half full.
	Proportional
)

// String returns "keep-tokens" or "proportional".
func (r ChangeRule) String() string {
	switch r {
	case KeepTokens:
		return "keep-tokens"
	case Proportional:
		return "proportional"
	}
	return fmt.Sprintf("ChangeRule(%d)", uint8(r))
}

// Valid reports whether r is one of the rules this package defines.
func (r ChangeRule) Valid() bool { return r <= Proportional }

// Rebase converts the bucket in state s, written under policy from, into
// the state of the same bucket under policy to at time now (µs): the one
// exact meaning of changing a live bucket's policy, which every store
// applies at the first call under the new policy.
//
// The bucket is first refilled under from, as Take refills it (steps 1 and
// 2: it is evaluated at t₁ = max(now, s.Stamp)). Let D be its deficit then,
// full = Capacity·Unit of each policy, F and T the two policies:
//
//   - A full bucket (D = 0) is full under the new policy, whatever the rule:
//     a full bucket is the same as no bucket, and every store forgets it
//     (memstore drops it, Redis lets its key expire), so no store could
//     tell it from a key never used.
//   - KeepTokens: the bucket holds (fullF − D)/UnitF tokens, a fraction in
//     general. Under T it holds that many, rounded down to T's unit (never
//     more than it held), and at most CapacityT: the deficit is
//     fullT − min(fullT, ⌊(fullF − D)·UnitT/UnitF⌋).
//   - Proportional: it holds the same fraction of a full bucket, rounded
//     down to T's unit: fullT − ⌊(fullF − D)·fullT/fullF⌋.
//   - Debt (D > fullF, which only a reservation makes) carries over as debt,
//     rounded up (never fewer tokens owed) and capped at one full bucket of
//     T: fullT + min(fullT, ⌈(D − fullF)·UnitT/UnitF⌉) for KeepTokens,
//     with fullT/fullF for UnitT/UnitF for Proportional.
//
// The products are formed exactly (in 128 bits here; in parts in the Lua
// twin). The new state's Stamp is t₁, and from then on the bucket refills
// at T's rate; its Prev is s's, as Take keeps it. Rebase from a policy to
// itself changes nothing a Take can see: it is the refill Take does first.
//
// A Ticket made by Reserve before the change describes the old units: a
// Cancel with it after the change gives nothing back (unless the new
// state happens to match it exactly; it then gives back at most its Units
// of the new policy, never more than two full buckets).
//
// A calendar quota ([Quota]) counts what was used in its period, so a
// change from one quota to another of the same period and offset keeps
// the count used (KeepTokens: an operator who raises a monthly quota
// mid-month adds to what is left) or scales it by the ratio of the two
// quotas, rounded up (Proportional). Any other change to or from a quota
// (another period or offset; a bucket becoming a quota, or a quota a
// bucket) has no common measure: the key starts afresh under the new
// policy, an unused quota or a full bucket.
//
// The errors are Take's for either policy (ErrInvalidPolicy), for now
// (ErrInvalidTime) and for s (ErrInvalidState), and ErrInvalidPolicy for an
// unknown rule; s is returned unchanged with them.
func (TokenBucket) Rebase(from, to Policy, s State, now int64, rule ChangeRule) (State, error) {
	ts := to.shape()
	fs := from.shape()
	if !rule.Valid() {
		return s, fmt.Errorf("%w: unknown change rule %v", ErrInvalidPolicy, rule)
	}
	if fs.unit <= 0 || ts.unit <= 0 {
		return rebaseQuota(from, to, s, now, rule)
	}
	if err := checkTake(from, s, now, 0); err != nil {
		return s, err
	}
	fullF, fullT := fs.capacity*fs.unit, ts.capacity*ts.unit
	d, t := refill(fullF, fs.refill, s, now)
	if from == to || d == 0 {
		return State{Level: d, Stamp: t, Prev: s.Prev}, nil
	}
	num, den := ts.unit, fs.unit // T units per F unit
	if rule == Proportional {
		num, den = fullT, fullF
	}
	if d <= fullF {
		d = fullT - min(fullT, mulDiv(fullF-d, num, den, false, 1<<62))
	} else {
		d = fullT + min(fullT, mulDiv(d-fullF, num, den, true, 1<<62))
	}
	return State{Level: d, Stamp: t, Prev: s.Prev}, nil
}

// rebaseQuota is Rebase when either policy is not a valid bucket: a
// calendar quota, or invalid.
func rebaseQuota(from, to Policy, s State, now int64, rule ChangeRule) (State, error) {
	ts := to.shape()
	fs := from.shape()
	for _, p := range [2]Policy{from, to} {
		if err := p.Validate(); err != nil {
			return s, err
		}
	}
	switch {
	case now < 0 || now > MaxTime:
		return s, ErrInvalidTime
	case s.Level < 0 || s.Prev < 0 || s.Stamp < 0 || s.Stamp > maxQuotaEnd:
		return s, ErrInvalidState
	case from == to:
		return s, nil
	}
	pf, of, qf := from.Calendar()
	pt, ot, qt := to.Calendar()
	if !qf || !qt || pf != pt || of != ot || now >= s.Stamp || s.Level == 0 {
		return State{Prev: s.Prev}, nil // afresh; or a period already over
	}
	c := min(s.Level, fs.capacity)
	if rule == Proportional {
		c = mulDiv(c, ts.capacity, fs.capacity, true, 1<<62)
	}
	return State{Level: min(c, ts.capacity), Stamp: s.Stamp, Prev: s.Prev}, nil
}
