package limitheader

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Case is one case of internal/testdata/ratelimit-headers.json: the clock,
// one limit, the store's answer, and the header values every front end
// must send for them.
type Case struct {
	// Case names the case; the others are the fixture's inputs as it
	// names them: the clock in Unix milliseconds, the limit, and the
	// store's answer with its durations in microseconds.
	Case         string `json:"case"`
	NowUnixMS    int64  `json:"now_unix_ms"`
	Name         string `json:"name"`
	Capacity     int64  `json:"capacity"`
	Remaining    int64  `json:"remaining"`
	ResetAfterUS int64  `json:"reset_after_us"`
	RetryAfterUS int64  `json:"retry_after_us"`
	Allowed      bool   `json:"allowed"`
	// Headers are the values by name as the fixture spells it
	// (X-RateLimit-Reset); Retry-After is absent unless denied.
	Headers map[string]string `json:"headers"`
}

// Now is the case's clock.
func (c Case) Now() time.Time { return time.UnixMilli(c.NowUnixMS) }

// ResetAfter is the store's time until the bucket is full.
func (c Case) ResetAfter() time.Duration { return time.Duration(c.ResetAfterUS) * time.Microsecond }

// RetryAfter is the store's time until the denied request could pass.
func (c Case) RetryAfter() time.Duration { return time.Duration(c.RetryAfterUS) * time.Microsecond }

// Answer is the case's input as an Answer.
func (c Case) Answer() Answer {
	return Answer{Name: c.Name, Capacity: c.Capacity, Remaining: c.Remaining,
		ResetAfter: c.ResetAfter(), RetryAfter: c.RetryAfter(), Denied: !c.Allowed}
}

// Result is the case's store answer.
func (c Case) Result() algo.Result {
	return algo.Result{Allowed: c.Allowed, Remaining: c.Remaining, ResetAfter: c.ResetAfter(), RetryAfter: c.RetryAfter()}
}

// Store returns a store answering every Take with the case's Result,
// whatever the bucket: the front ends' tests put it behind their real
// header-writing code. It is a store with a fixed answer, not a mock of a
// backend. Its other operations are not for use (they panic: the
// embedded Store is nil).
func (c Case) Store() store.Store { return answerStore{res: c.Result()} }

type answerStore struct {
	store.Store // nil: only Take answers
	res         algo.Result
}

func (s answerStore) Take(context.Context, store.Request) (algo.Result, error) {
	return s.res, nil
}

// Names are the fields the fixture pins, in its spelling. A front end may
// send others (RateLimit-Policy); these it must send exactly as the case
// says, and Retry-After only when the case has it.
var Names = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "Retry-After"}

// Mismatches compares what a front end sent, get(name) giving the values
// of the field in the fixture's spelling, with the case's headers, and
// describes each difference.
func (c Case) Mismatches(get func(name string) []string) []string {
	var bad []string
	for _, name := range Names {
		want, sent := c.Headers[name]
		got := get(name)
		switch {
		case !sent && len(got) > 0:
			bad = append(bad, fmt.Sprintf("%s: %q, want none", name, got))
		case sent && (len(got) != 1 || got[0] != want):
			bad = append(bad, fmt.Sprintf("%s: %q, want %q", name, got, want))
		}
	}
	return bad
}

// ReadCases reads the fixture at path (from a package directory,
// "../internal/testdata/ratelimit-headers.json" or deeper), refusing
// unknown fields so that a case the tests cannot read fails them.
func ReadCases(path string) ([]Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		About string `json:"about"`
		Cases []Case `json:"cases"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Cases) == 0 {
		return nil, fmt.Errorf("%s: no cases", path)
	}
	return f.Cases, nil
}
