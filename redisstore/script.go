package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

//go:embed tokenbucket.lua
var scriptSrc string

// script is the token-bucket script; only its source and SHA1 are used,
// since it is run through noRetry below rather than Script.Run.
var script = redis.NewScript(scriptSrc)

// Script returns the embedded token-bucket script, for tools that load it
// ahead of time (Script().Load) or measure it, such as redis-benchmark
// running one Take of cost 1 on a bucket of 100 refilled 2 per second with
// the server clock (the bucket's key, then the policy registry; the
// policy as capacity:unit:refill, then the cost, left out when 1):
//
//	redis-benchmark EVALSHA <Script().Hash()> 2 rb:k pol:rb: 100:500000:1
//
// The keys are the buckets' and the registry of their slot; the arguments
// are the call (clock "s" server or "c" client, then op "t" take, "m"
// multi, "i" inspect, "r" refund, "a" take at most, "v" reserve or "x"
// cancel, then "k" to keep corrupt keys and "q" for proportional policy
// changes; a take on the server clock, "st", is left out), for a client
// clock now in µs and the TTL margin in ms (-1: none), and per key the
// policy (capacity, Policy.Unit and Policy.Refill, joined by colons) and
// the op's own: cost (or n; when it is the op's one number and 1 for
// every key, none), a reservation's maxWait after it, a cancel's
// ticket instead (see tokenbucket.lua). They are a versioned contract,
// written down in WIRE.md beside the script ([WireVersion]): other
// runtimes call the same script and share buckets with this package.
func Script() *redis.Script { return script }

// Script ops (the second letter of the call).
const (
	opTake    = "t"
	opMulti   = "m"
	opInspect = "i"
	opRefund  = "r" // one or more keys, each alone
	opAtMost  = "a"
	opReserve = "v"
	opCancel  = "x"
	opHold    = "h" // KEYS: the bucket, its hold record, the registry
	opSettle  = "e" // the same keys
)

// noRetry is a script command that go-redis must never send twice: a
// timed-out EVALSHA may have run and charged the bucket. go-redis checks
// NoRetry before each of its retries (MaxRetries, and MaxRedirects on a
// cluster, where MOVED and ASK are still followed: they mean the script did
// not run); it still re-sends a command it has proof was never written.
//
// The command is a StringCmd: the script replies with one string of
// packed integers (see ints), which costs Redis half what an array does.
type noRetry struct{ *redis.StringCmd }

// NoRetry reports true: see the type.
func (noRetry) NoRetry() bool { return true }

// inspected is what a call returns beyond its Results, and what a
// reservation or a cancel passes beyond its requests (see tokenbucket.lua's
// reply).
type inspected struct {
	now                  int64 // the time the call was decided at
	deficit, stamp, pttl int64 // opInspect: the stored state, the key's PTTL
	granted              int64 // opAtMost: the tokens granted
	wait, delay          int64 // opReserve: maxWait (in) and the Delay, in µs
	ticket               algo.Ticket
	gave                 bool      // opCancel: the tokens were given back
	hold                 algo.Hold // opHold: its ID and TTL (in Deadline) in, its deadline out; opSettle: the hold
	actual, status, left int64     // opSettle: the actual cost; the script's status and the uncharged tokens
}

// extraLen is how many integers op adds to the reply after its one key's
// four.
func extraLen(op string) int {
	switch op {
	case opInspect:
		return 3
	case opAtMost, opCancel, opHold:
		return 1
	case opReserve:
		return 4
	case opSettle:
		return 2
	}
	return 0
}

// run validates reqs, calls the script once and fills results (one per
// request). When in is not nil it gets the time the script used, and for
// opInspect the stored state too.
func (s *Store) run(ctx context.Context, op string, reqs []store.Request, results []algo.Result, in *inspected) error {
	if len(reqs) == 1 {
		if err := store.CheckRequest(reqs[0], s.maxKey); err != nil {
			return fmt.Errorf("redisstore: key %.64q: %w", reqs[0].Key, err)
		}
	} else if err := store.CheckRequests(reqs, s.maxKey); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if op != opTake && op != opMulti && op != opInspect && op != opRefund {
		for _, r := range reqs {
			if r.Policy.IsQuota() { // as algo answers it, and so memstore
				return fmt.Errorf("redisstore: key %.64q: %w", r.Key, algo.ErrQuotaUnsupported)
			}
		}
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.route.sameSlot(s.prefix, reqs); err != nil {
		return err
	}
	clock, now := "s", int64(0)
	if s.clk != nil {
		clock, now = "c", s.clk.Now().UnixMicro()
		if now < 0 || now > algo.MaxTime {
			return fmt.Errorf("redisstore: client clock %d µs: %w", now, algo.ErrInvalidTime)
		}
	}
	c := newCall(ctx)
	s.fillArgs(c, op, clock, now, reqs, in)
	var buf [8]int64 // the reply of one key, on the stack
	vals, err := s.send(c, op != opInspect, buf[:0])
	if err != nil {
		return err
	}
	repaired, err := parseReply(vals, op, reqs, results, in)
	for i := 0; i+1 < len(repaired); i += 2 {
		s.onRepair(s.prefix+reqs[repaired[i]-1].Key, repairError(s.prefix+reqs[repaired[i]-1].Key, repaired[i+1]))
	}
	return err
}

// send makes one script call, c.args as fillArgs or leaseArgs build it:
// through the pipeline when pipelined and the store has one, else on its
// own (with EVAL after NOSCRIPT, or FCALL after loading a missing library,
// as the pipeline does), bounded by the store's Timeout when ctx has no
// deadline. It returns the script's reply, appended to dst unless c shared
// a call (see split), or an error from callError, and frees c when nothing
// else holds it.
func (s *Store) send(c *call, pipelined bool, dst []int64) ([]int64, error) {
	var cmd *redis.StringCmd
	var vals []int64 // c's share of a shared call's reply
	var cerr error   // the context's error, or DeadlineExceeded past c.dl
	if s.pipe != nil && pipelined {
		s.deadline(c)
		if err := s.pipe.do(c); err != nil {
			return nil, err // c may still be in a writer's hands: not freed
		}
		cmd, vals = c.cmd, c.vals
		if cerr = c.ctx.Err(); cerr == nil && !c.dl.IsZero() && !time.Now().Before(c.dl) {
			cerr = context.DeadlineExceeded // the socket saw the deadline first
		}
	} else {
		ctx, cancel := s.bound(c.ctx)
		defer cancel()
		cmd = redis.NewStringCmd(ctx, c.args...)
		_ = s.rdb.Process(ctx, noRetry{cmd})
		if s.fn.retry(ctx, cmd, c.args) { // NOSCRIPT, or no function library
			c.wrote.CompareAndSwap(writing, unwritten) // the first did not run
			cmd = redis.NewStringCmd(ctx, c.args...)
			_ = s.rdb.Process(ctx, noRetry{cmd})
		}
		if cerr = ctx.Err(); cerr == nil {
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
				cerr = context.DeadlineExceeded // the socket saw the deadline first
			}
		}
	}
	err := cmd.Err()
	if err != nil {
		s.fo.check(err)
		err = callError(c.wrote.Load() == writing, cerr, err)
	} else if vals == nil {
		vals, err = ints(dst, cmd.Val())
	}
	c.free()
	return vals, err
}

// ints appends to dst the integers of a script's reply: one string of
// big-endian 64-bit two's complement integers (WIRE.md, "The script").
func ints(dst []int64, reply string) ([]int64, error) {
	if len(reply)%8 != 0 {
		return dst, fmt.Errorf("redisstore: script reply: %d bytes, not 64-bit integers", len(reply))
	}
	for i := 0; i < len(reply); i += 8 {
		dst = append(dst, int64(binary.BigEndian.Uint64([]byte(reply[i:i+8]))))
	}
	return dst, nil
}

// deadline sets c's deadline: its context's, or else the store's Timeout
// from now, which makes it a timed call (see call). A call whose context
// has no deadline under a negative Timeout has none.
func (s *Store) deadline(c *call) {
	if dl, ok := c.ctx.Deadline(); ok {
		c.dl = dl
	} else if s.timeout >= 0 {
		c.dl, c.timed = time.Now().Add(s.timeout), true
	}
}

// repairError describes a repair the script reported: kind is what the key
// held (see tokenbucket.lua's reply).
func repairError(key string, kind int64) error {
	held := fmt.Sprintf("was corrupt (kind %d)", kind)
	switch kind {
	case 1:
		held = "held another Redis type"
	case 2:
		held = "held the other clock's format"
	case 3:
		held = "held a value that is not a bucket"
	case 4:
		held = "had a bad or missing expiry"
	}
	return fmt.Errorf("redisstore: key %.300q %s; rewritten as an empty bucket: %w", key, held, store.ErrCorruptState)
}

// Arguments boxed once, so that building a call does not allocate them.
var (
	argSHA  any = script.Hash()
	argCall     = map[string]any{} // the call's letters: clock, op, "k" (KeepCorrupt, not inspect's), "q" (Proportional)
)

func init() {
	for _, clock := range []string{"s", "c"} {
		for _, op := range []string{opTake, opMulti, opInspect, opRefund, opAtMost, opReserve, opCancel, opHold, opSettle} {
			for _, keep := range []string{"", "k"} {
				for _, change := range []string{"", "q"} { // Config.OnPolicyChange
					w := clock + op + keep + change
					argCall[w] = w
				}
			}
		}
	}
	argCall["st"] = nil // the common call is left out
}

// policyArg is a policy as the script reads it, "capacity:unit:refill",
// written into the call's own storage so that a reused call allocates
// nothing (go-redis asks for the bytes as it writes the command).
type policyArg struct{ b []byte }

func (p *policyArg) set(q algo.Policy) {
	p.b = strconv.AppendInt(p.b[:0], q.Capacity(), 10)
	p.b = append(p.b, ':')
	p.b = strconv.AppendInt(p.b, q.Unit(), 10)
	p.b = append(p.b, ':')
	p.b = strconv.AppendInt(p.b, q.Refill(), 10)
}

// MarshalBinary returns the policy's bytes.
func (p *policyArg) MarshalBinary() ([]byte, error) { return p.b, nil }

// String returns the policy, for logs.
func (p *policyArg) String() string { return string(p.b) }

// scriptArgs builds the EVALSHA command: "evalsha", sha, numkeys, the
// keys and the registry, the call (none for a take on the server clock),
// for a client clock now and the margin, then per key its policy and cost
// (none when every cost is 1 and it is the op's one number),
// with opReserve's maxWait and opHold's TTL after them, for opCancel the
// ticket (At, Units, Mark) instead of the cost and for opSettle the actual
// cost, estimate and deadline (see tokenbucket.lua); opHold and opSettle
// add the hold's record among the keys. in carries those; it may be nil
// for other ops.
func (s *Store) scriptArgs(op, clock string, now int64, reqs []store.Request, in *inspected) []any {
	c := new(call)
	s.fillArgs(c, op, clock, now, reqs, in)
	return c.args
}

// fillArgs builds scriptArgs' command in c.args. The keys, policies and
// numbers are kept in c and the arguments point to them (go-redis writes a
// *string and a *int64 as it writes a string and an int64), so that a
// reused call boxes nothing. The registry's argument is c.mark, which
// marks the call written as go-redis writes it (see written).
func (s *Store) fillArgs(c *call, op, clock string, now int64, reqs []store.Request, in *inspected) {
	per := 1 // cost
	switch op {
	case opReserve:
		per = 2 // and maxWait
	case opCancel, opSettle:
		per = 3 // the ticket instead of the cost; the actual cost, estimate and deadline
	case opHold:
		per = 2 // and the TTL
	}
	held := op == opHold || op == opSettle // a hold record among the keys
	// One number a key, every one 1 (most takes): left out of the call, a
	// Redis argument less a key to read (WIRE.md, "The script"); still
	// kept in c.nums, for a shared call (see takeBatch).
	c.ones = per == 1
	for _, r := range reqs {
		c.ones = c.ones && r.Cost == 1
	}
	nums := per * len(reqs)
	if clock != "s" {
		nums++
	}
	c.nums = slices.Grow(c.nums[:0], nums)[:nums]
	c.keys = slices.Grow(c.keys[:0], len(reqs)+1)[:len(reqs)]
	c.pols = slices.Grow(c.pols[:0], len(reqs))[:len(reqs)]
	args := slices.Grow(c.args[:0], 5+2*len(reqs)+nums+2)
	verb, target := s.fn.head() // EVALSHA or FCALL
	// The keys, then the policy registry of the first one's slot or shard.
	nkeys := len(reqs) + 1
	if held {
		nkeys++
	}
	args = append(args, verb, target, nkeys)
	for i, r := range reqs {
		c.keys[i] = s.prefix + r.Key
		args = append(args, &c.keys[i])
	}
	reg, regBytes := s.regs.key(c.keys[0])
	if held { // in the registry's slot, which is the bucket's
		c.hkey = holdKey(reg, in.hold.ID, c.keys[0])
		args = append(args, &c.hkey)
	}
	c.keys = append(c.keys, reg)
	c.mark.word = regBytes
	args = append(args, &c.mark)
	keep := s.keep
	if op == opInspect {
		keep = "" // inspect never repairs
	}
	c.letters = argCall[clock+op+keep+s.change]
	if c.letters != nil {
		args = append(args, c.letters)
	}
	// A take of one bucket on the server clock may share a script call
	// with others (see pipeliner.exec): not one that keeps corrupt keys
	// (its error would fail the others), not a quota's (the batch's fast
	// path is a bucket's), and not on a Ring, which sends a call to its
	// first key's shard.
	c.batch = op == opTake && clock == "s" && len(reqs) == 1 && keep == "" && s.route != ring && !reqs[0].Policy.IsQuota()
	n := c.nums
	if clock != "s" {
		n[0] = now
		args = append(args, &n[0], s.marginArg)
		n = n[1:]
	}
	for i, r := range reqs {
		c.pols[i].set(r.Policy)
		args = append(args, &c.pols[i])
		switch op {
		case opReserve:
			n[0], n[1] = r.Cost, in.wait
		case opCancel:
			n[0], n[1], n[2] = in.ticket.At, in.ticket.Units, in.ticket.Mark
		case opHold:
			n[0], n[1] = r.Cost, in.hold.Deadline // the TTL
		case opSettle:
			n[0], n[1], n[2] = in.actual, in.hold.Estimate, in.hold.Deadline
		default:
			n[0] = r.Cost
		}
		if !c.ones {
			for i := range per {
				args = append(args, &n[i])
			}
		}
		n = n[per:]
	}
	c.args = args
}

// bound gives ctx the store's Timeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || s.timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// parseReply checks the script's reply and turns it into Results. It
// returns the reply's list of repaired keys: pairs of a 1-based index into
// reqs and the kind of corruption found.
func parseReply(vals []int64, op string, reqs []store.Request, results []algo.Result, in *inspected) ([]int64, error) {
	want := 2 + 4*len(reqs) + extraLen(op)
	repaired := vals[min(want, len(vals)):]
	if len(vals) < want || len(repaired)%2 != 0 {
		return nil, fmt.Errorf("redisstore: script replied %d integers, want %d and pairs", len(vals), want)
	}
	for i := 0; i < len(repaired); i += 2 {
		if repaired[i] < 1 || repaired[i] > int64(len(reqs)) {
			return nil, fmt.Errorf("redisstore: script reported a repair of key %d of %d", repaired[i], len(reqs))
		}
	}
	for i := range reqs {
		v := vals[2+4*i:]
		results[i] = algo.Result{
			Allowed:    v[0] == 1,
			Remaining:  v[1],
			RetryAfter: algo.Micros(v[2]),
			ResetAfter: algo.Micros(v[3]),
		}
	}
	if in == nil {
		return repaired, nil
	}
	in.now = vals[0]
	switch v := vals[2+4*len(reqs):]; op {
	case opInspect:
		in.deficit, in.stamp, in.pttl = v[0], v[1], v[2]
	case opAtMost:
		in.granted = v[0]
	case opReserve:
		in.delay, in.ticket = v[0], algo.Ticket{At: v[1], Units: v[2], Mark: v[3]}
	case opCancel:
		in.gave = v[0] == 1
	case opHold:
		in.hold.Deadline = v[0]
	case opSettle:
		in.status, in.left = v[0], v[1]
	}
	return repaired, nil
}

// callError maps err, the error go-redis gave a script call, to the
// store's: a call go-redis never began to write failed to connect
// (ErrNotSent); else the script's own error replies become sentinels, and
// the context's error cerr, when it ended (a socket timeout at the
// context's deadline is a net error, not context.DeadlineExceeded), says
// that the script may have run.
func callError(wrote bool, cerr, err error) error {
	if !wrote {
		return connFailed(cerr, err)
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "RBCORRUPT"):
		return fmt.Errorf("redisstore: %w: %w", store.ErrCorruptState, err)
	case strings.HasPrefix(msg, "RBARG"):
		return fmt.Errorf("redisstore: script refused its arguments (a bug): %w", err)
	case cerr != nil && !errors.Is(err, cerr):
		return fmt.Errorf("redisstore: %w after the call was sent (the script may have run): redis: %w", cerr, err)
	case cerr != nil:
		return fmt.Errorf("redisstore: %w after the call was sent (the script may have run)", cerr)
	}
	return fmt.Errorf("redisstore: redis: %w", err)
}
