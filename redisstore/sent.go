package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotSent reports a call that was never sent to Redis, so that nothing
// was charged: no connection could be had before its deadline (a refused
// or failed dial, a handshake the server did not answer, no free
// connection in the pool), or it was still queued for a pipeline. Errors
// that match it say which. Any other failure of a call whose context ended
// says "the script may have run": its request was written, and Redis may
// still run it.
var ErrNotSent = errors.New("redisstore: not sent to Redis (nothing charged)")

// notSent is the error of a call that was never sent: its text is err's,
// and it matches ErrNotSent as well as what err wraps.
type notSent struct{ err error }

func (e notSent) Error() string        { return e.err.Error() }
func (e notSent) Unwrap() error        { return e.err }
func (e notSent) Is(target error) bool { return target == ErrNotSent }

// connFailed is the error of a call that go-redis gave back unwritten:
// err is go-redis's (a dial error, a handshake's, the pool's), cerr the
// context's error if its deadline passed first.
func connFailed(cerr, err error) error {
	switch {
	case cerr != nil && err != nil && !errors.Is(err, cerr):
		err = fmt.Errorf("redisstore: connection to Redis failed, nothing was sent (nothing charged): %w before a connection was ready: redis: %w", cerr, err)
	case cerr != nil:
		err = fmt.Errorf("redisstore: connection to Redis failed, nothing was sent (nothing charged): %w before a connection was ready", cerr)
	default:
		err = fmt.Errorf("redisstore: connection to Redis failed, nothing was sent (nothing charged): %w", err)
	}
	return notSent{err}
}

// What go-redis has done with a call's command (call.wrote).
const (
	unwritten int32 = iota
	writing         // go-redis has asked for its bytes: it may have left
	withdrawn       // its caller was told nothing was sent: it never leaves
)

// errWithdrawn fails the writing of a command whose caller was told that
// nothing was sent. It matches context.DeadlineExceeded, so that go-redis
// drops the connection it had begun to write on.
var errWithdrawn = fmt.Errorf("redisstore: the call was withdrawn at its deadline: %w", context.DeadlineExceeded)

// written is an argument of a script call that go-redis writes (the
// bucket script's registry key, the lease script's letters): it asks for
// the bytes (encoding.BinaryMarshaler) as it writes the command into the
// connection's buffer, right before it flushes it, so written learns, for
// each of the calls the command carries (one, or a batch of takes), that
// it may have left. Nothing else in go-redis asks for them on the way
// (String is for logs); a command whose call was withdrawn fails to write
// instead.
type written struct {
	word  []byte
	calls []*call
	one   [1]*call // calls of a call's own mark
}

// MarshalBinary marks the calls written and returns the bytes, or fails
// if one of them was withdrawn.
func (w *written) MarshalBinary() ([]byte, error) {
	for _, c := range w.calls {
		if !c.wrote.CompareAndSwap(unwritten, writing) && c.wrote.Load() == withdrawn {
			return nil, errWithdrawn
		}
	}
	return w.word, nil
}

// String returns the bytes, for logs.
func (w *written) String() string { return string(w.word) }

// sameWord reports whether a and b are the same bytes: each word (a
// registry's name, the lease script's letters) is one slice, shared by
// every call that uses it.
func sameWord(a, b []byte) bool { return &a[0] == &b[0] }

// withdraw makes sure that go-redis never writes c's command, which it has
// not yet begun to write, and reports whether it could: it could not once
// go-redis began. The caller is then told that nothing was sent.
func (c *call) withdraw() bool {
	return c.wrote.CompareAndSwap(unwritten, withdrawn) || c.wrote.Load() == withdrawn
}

// unsent reports whether c, sent to go-redis and left by its caller at
// now, can be reported as not sent: go-redis has not begun to write it,
// and withdrawing it fails no other call, as it was sent alone, or its
// pipeline's deadline has passed (go-redis can then write none of it).
func (c *call) unsent(now time.Time) bool {
	if until := c.until.Load(); until == 0 || now.UnixNano() < until {
		return c.wrote.Load() == withdrawn
	}
	return c.withdraw()
}

// sentAlone is call.until for a call sent on its own.
const sentAlone = 1

// markUntil records how c's command went to go-redis: alone, or in a
// pipeline with deadline dl (zero: none), after which go-redis writes no
// part of it.
func (c *call) markUntil(alone bool, dl time.Time) {
	switch {
	case alone:
		c.until.Store(sentAlone)
	case dl.IsZero():
		c.until.Store(0)
	default:
		c.until.Store(dl.UnixNano())
	}
}
