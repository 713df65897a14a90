package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// decodeInspect decodes inspect --json output strictly: every field known
// to inspectJSON, and no object with two names that differ only in case
// (the old output had both "key" and "Key").
func decodeInspect(t *testing.T, out string) []inspectJSON {
	t.Helper()
	noDuplicateNames(t, out)
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var rows []inspectJSON
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	return rows
}

// noDuplicateNames fails the test if any object in the JSON text has a
// name twice, compared case-insensitively, as encoding/json matches names
// when it decodes.
func noDuplicateNames(t *testing.T, text string) {
	t.Helper()
	if name, err := duplicateName(text); err != nil || name != "" {
		t.Fatalf("duplicate name %q (%v) in:\n%s", name, err, text)
	}
}

// duplicateName returns the first name found twice in one object of the
// JSON text, compared case-insensitively, or "".
func duplicateName(text string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	type level struct {
		names map[string]bool // nil for an array
		name  bool            // in an object, the next token is a name
	}
	var stack []*level
	valueRead := func() {
		if n := len(stack); n > 0 && stack[n-1].names != nil {
			stack[n-1].name = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return "", nil
		} else if err != nil {
			return "", err
		}
		if n := len(stack); n > 0 && stack[n-1].name {
			top := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueRead()
				continue
			}
			name := strings.ToLower(tok.(string))
			if top.names[name] {
				return tok.(string), nil
			}
			top.names[name], top.name = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{names: map[string]bool{}, name: true})
		case json.Delim('['):
			stack = append(stack, &level{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueRead()
		default:
			valueRead()
		}
	}
}

func TestDuplicateName(t *testing.T) {
	for text, want := range map[string]string{
		`[{"key":"a","Key":"b"}]`:                    "Key", // inspect --json before
		`[{"key":"a","redis_key":"b"},{"key":"c"}]`:  "",
		`{"a":{"x":1},"b":{"x":[1,{"x":2}]},"c":[]}`: "",
		`{"a":{"x":1,"b":[{"y":1,"Y":2}]}}`:          "Y",
		`{"a":[1,2],"b":{},"A":3}`:                   "A",
	} {
		if got, err := duplicateName(text); got != want || err != nil {
			t.Errorf("duplicateName(%s) = %q, %v; want %q", text, got, err, want)
		}
	}
}
