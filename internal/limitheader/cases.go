package limitheader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Case is one case of internal/testdata/ratelimit-headers.json: the clock,
// one limit, the store's answer, and the header values every front end
// must send for them.
type Case struct {
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
