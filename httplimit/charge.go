package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Charging by outcome (Config.ChargeIf). A request is charged when it is
// admitted, before its handler runs, as every request is; when its
// handler has returned, ChargeIf reads the status of the response and
// says whether the charge stands. When it does not, the tokens go back to
// the buckets they came from (store.Store), with the same keys,
// policies and cost. The response has been written by then, so a refund
// never turns an admitted request into a 429; it is one store call made
// before the handler's ServeHTTP returns, as a Concurrency lease's
// release is.
//
// Only a charge this middleware made on its store is given back: a
// request that was refused (429), skipped, served while the store failed
// (FailOpen: nothing was charged) or decided by a FailMode's Verdict.Result
// (charged on the FailMode's store, not this one) is never refunded. Nor
// is a request whose handler panicked: the middleware does not recover the
// panic, which reaches the server (or a recovery middleware around this
// one) unchanged, and its charge stands; put a recovery middleware inside
// this one, between it and the handler, to have a panic count as the 500
// it writes. A connection the handler hijacked keeps its charge too: its
// outcome is not a status the middleware can read.

//
// The takes of such a route are marked store.Request.Refundable: a store that
// answers from what it learnt of earlier answers (hybrid.DenyCache) then
// neither answers them locally nor learns from them, so that a refund
// made by another instance of the fleet, which that store cannot see,
// never leaves it denying what the shared store would admit.

// checkChargeIf returns an error wrapping ErrInvalidConfig and
// store.ErrUnsupported when the route charges by outcome and its store
// cannot give tokens back. Otherwise the route's takes go through
// refundableStore.
func (m *Middleware) checkChargeIf() error {
	if m.chargeIf == nil {
		return nil
	}
	s := baseStore(m.store)
	m.refunder, m.store = s, refundableStore{s}
	return nil
}

// refundableStore is the store of a route whose charges may be given back:
// it marks every take Refundable (store.Request). A route made With a
// ChargeIf route's Middleware inherits it, and so marks its takes too
// (routes whose limits share a Name share their buckets, which the
// parent's refunds reach). baseStore unwraps it for the interfaces it does
// not pass on (store.Store, store.Store).
type refundableStore struct{ store.Store }

// Take takes with the request marked Refundable.
func (s refundableStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	req.Refundable = true
	return s.Store.Take(ctx, req)
}

// TakeMulti takes atomically with every request marked Refundable.
func (s refundableStore) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	marked := make([]store.Request, len(reqs))
	for i, r := range reqs {
		r.Refundable = true
		marked[i] = r
	}
	return s.Store.TakeMulti(ctx, marked)
}

// baseStore returns the store a refundableStore wraps, or s.
func baseStore(s store.Store) store.Store {
	if r, ok := s.(refundableStore); ok {
		return r.Store
	}
	return s
}

// serveCharged serves an admitted request whose charge depends on its
// outcome: ev (already observed) describes it, and takes are what it was
// charged. After the handler returns, a status that ChargeIf does not
// count gives the charge back.
func (m *Middleware) serveCharged(w http.ResponseWriter, r *http.Request, next http.Handler, ev Event, takes []store.Request) {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r) // a panic leaves from here: no refund
	if sw.hijacked || m.chargeIf(sw.final()) || takes[0].Cost == 0 {
		return
	}
	ctx := context.WithoutCancel(m.labelled(r)) // the client may have left
	start := m.clock.Now()
	err := m.refund(ctx, takes)
	ev.Outcome, ev.Latency, ev.Err = Refunded, m.clock.Now().Sub(start), err
	if err != nil {
		m.log.log(ctx, slog.LevelError, "httplimit: refund failed; the request stays charged",
			slog.String("pattern", r.Pattern), slog.Any("error", err))
	}
	m.observe(r, ev)
}

// refund gives takes back: one Refund, or every limit at once with
// RefundMulti, and one at a time when the store cannot take the keys
// together (store.ErrNotTogether: redisstore on a Cluster, for limits
// keyed by different KeyFuncs).
func (m *Middleware) refund(ctx context.Context, takes []store.Request) error {
	if len(takes) == 1 {
		_, err := m.refunder.Refund(ctx, takes[0])
		return err
	}
	_, err := m.refunder.RefundMulti(ctx, takes)
	if !errors.Is(err, store.ErrNotTogether) {
		return err
	}
	var errs []error
	for i, q := range takes {
		if _, err := m.refunder.Refund(limitContext(ctx, i), q); err != nil {
			errs = append(errs, fmt.Errorf("limit key %q: %w", q.Key, err))
		}
	}
	return errors.Join(errs...)
}

// statusWriter records the status of the response written through it.
// It keeps the ResponseWriter's optional behaviour: Unwrap serves
// http.ResponseController (deadlines, full duplex), and Flush, FlushError,
// Hijack and ReadFrom pass through. It always has Flush and Hijack; over a
// writer that cannot, Flush does nothing and Hijack returns an error
// wrapping http.ErrNotSupported, as http.ResponseController's do.
type statusWriter struct {
	http.ResponseWriter
	status   int  // the status sent, 0 until one is
	hijacked bool // the handler took the connection over
}

// final returns the response's status: 200 when the handler wrote
// nothing, as net/http then sends.
func (w *statusWriter) final() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// WriteHeader records the first final status (1xx ones other than 101
// Switching Protocols are informational: another status follows) and
// writes it.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// sent records that the response began with 200, unless a status was
// written before.
func (w *statusWriter) sent() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
}

// Write writes b, the status then being 200 if none was written.
func (w *statusWriter) Write(b []byte) (int, error) {
	w.sent()
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies src to the response, with the underlying writer's
// ReadFrom when it has one (sendfile).
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	w.sent()
	return io.Copy(w.ResponseWriter, src)
}

// Unwrap returns the underlying ResponseWriter, for
// http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// FlushError flushes the response, the status then being 200 if none was
// written.
func (w *statusWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil {
		w.sent()
	}
	return err
}

// Flush is FlushError for http.Flusher, whose Flush reports nothing.
func (w *statusWriter) Flush() { _ = w.FlushError() }

// Hijack takes the connection over, for http.Hijacker: the request's
// charge then stands.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, rw, err
}
