package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket/internal/redistest"
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

// shellWords splits a command line as a POSIX shell would, for the words
// shellQuote writes: plain, or in single quotes with '\” for a quote.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w bytes.Buffer
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			in = true
		case c == ' ':
			if in {
				words, in = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// joinContinued joins each line ending in " \\" with the next, as a
// shell reads them.
func joinContinued(lines []string) []string {
	var out []string
	cont := false
	for _, l := range lines {
		if cont {
			out[len(out)-1] += " " + strings.TrimLeft(l, " ")
		} else {
			out = append(out, l)
		}
		last := &out[len(out)-1]
		if cont = strings.HasSuffix(*last, " \\"); cont {
			*last = strings.TrimSuffix(*last, " \\")
		}
	}
	return out
}

// inspectLineIn returns the words of the one command in lines (continued
// lines joined) that is a ratebucket inspect command.
func inspectLineIn(t *testing.T, lines []string) []string {
	t.Helper()
	var found []string
	for _, l := range joinContinued(lines) {
		if i := strings.Index(l, "ratebucket inspect "); i >= 0 {
			if found != nil {
				t.Fatalf("two inspect lines:\n%s", strings.Join(lines, "\n"))
			}
			found = shellWords(t, l[i:])
		}
	}
	if found == nil {
		t.Fatalf("no ratebucket inspect line in:\n%s", strings.Join(lines, "\n"))
	}
	return found
}

// runInspectLine runs the demo's inspect command, as printed, and with
// --json, and returns the one bucket it read, failing unless Redis holds
// it.
func runInspectLine(t *testing.T, words []string) inspectJSON {
	t.Helper()
	if len(words) < 3 || words[0] != "ratebucket" || words[1] != "inspect" {
		t.Fatalf("not an inspect command: %q", words)
	}
	stdout, stderr, code := runCLI(t, words[1:]...)
	if code != exitOK || strings.Contains(stdout, "absent") {
		t.Fatalf("%q exited %d, %s:\n%s", words, code, stderr, stdout)
	}
	stdout, stderr, code = runCLI(t, append(words[1:len(words)-1:len(words)-1], "--json", words[len(words)-1])...)
	if code != exitOK {
		t.Fatalf("%q --json exited %d, %s", words, code, stderr)
	}
	rows := decodeInspect(t, stdout)
	if len(rows) != 1 || !rows[0].Exists {
		t.Fatalf("the demo's inspect line found %+v, want its bucket", rows)
	}
	return rows[0]
}

// TestDemoPrintsInspect: the demo's report ends with the inspect command
// for its bucket, and --serve prints one when it starts serving; run
// against the same redis-server, each finds the demo's key, not a full
// absent bucket under the default prefix.
func TestDemoPrintsInspect(t *testing.T) {
	srv := redistest.Start(t)
	stdout, stderr, code := runCLI(t, "demo", "--redis", srv.Addr, "-n", "30", "-c", "3", "--capacity", "10", "--rate", "1/m")
	if code != exitOK {
		t.Fatalf("demo exited %d: %s", code, stderr)
	}
	wantText(t, stdout) // within 80 columns
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if joined := joinContinued(lines); !strings.HasPrefix(strings.TrimSpace(joined[len(joined)-1]), "ratebucket inspect ") {
		t.Fatalf("the report does not end with the inspect command:\n%s", stdout)
	}
	words := inspectLineIn(t, lines)
	if b := runInspectLine(t, words); b.Key != "h:default:user{test-user}" || b.Tokens != 0 || b.Capacity != 10 || b.FullInMS <= 0 {
		t.Fatalf("after 30 requests: %+v, want the user's bucket empty", b)
	}
	r := runDemoJSON(t, "--redis", srv.Addr, "-n", "5", "-c", "1", "--capacity", "10", "--rate", "1/m")
	if r.Redis == nil || runInspectLine(t, shellWords(t, r.Redis.Inspect)).Tokens != 5 {
		t.Fatalf("--json report's inspect line %+v", r.Redis)
	}

	base, head, stop := serveDemoHead(t, "--redis", srv.Addr, "-n", "0", "--instances", "1",
		"--capacity", "5", "--rate", "1/m", "--user", "serve-test")
	words = inspectLineIn(t, head)
	if resp, body := call(t, http.MethodGet, base+"/api/feed"); resp.StatusCode != 200 {
		t.Fatalf("feed: %d %s", resp.StatusCode, body)
	}
	if b := runInspectLine(t, words); b.Key != "h:default:user{serve-test}" || b.Tokens != 4 {
		t.Fatalf("--serve's inspect line found %+v, want serve-test's bucket with 4 left", b)
	}
	stop()
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"rb:demo:1a2b:", "h:default:user{x}", "it's", "", "redis://h:1?addr=h:2&x=1", "a b"} {
		if got := shellWords(t, "x "+shellQuote(s)); len(got) != 2 || got[1] != s {
			t.Errorf("shellQuote(%q) = %s: reads back as %q", s, shellQuote(s), got)
		}
	}
}

// TestWrapCommand: a wrapped command keeps within the width where its
// words allow, and reads back as the same words.
func TestWrapCommand(t *testing.T) {
	words := []string{"ratebucket", "inspect", "--redis", "redis://127.0.0.1:6379/0", "--prefix", "rb:demo:0123abcd:",
		"--capacity", "100", "--rate", "2/s", shellQuote("h:default:user{a b}")}
	out := wrapCommand(words, "  ", 40)
	lines := strings.Split(out, "\n")
	for _, l := range lines {
		if len(l) > 40 {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}
	got := shellWords(t, strings.TrimSpace(joinContinued(lines)[0]))
	if want := append(words[:len(words)-1:len(words)-1], "h:default:user{a b}"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("read back %q, want %q:\n%s", got, want, out)
	}
}
