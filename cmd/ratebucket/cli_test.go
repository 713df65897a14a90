package main

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// update rewrites the golden files in testdata: go test ./cmd/ratebucket -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// runCLI runs the command line args through run, as main would, and
// returns what it wrote and its exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runContext(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// wantOneLine fails unless stderr is exactly one line containing want:
// errors are one clear line, never a stack trace or a usage dump.
func wantOneLine(t *testing.T, stderr, want string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("stderr is not one line:\n%s", stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Fatalf("stderr = %q, want it to contain %q", stderr, want)
	}
	if stackTrace.MatchString(stderr) {
		t.Fatalf("stderr holds a stack trace: %s", stderr)
	}
}

// stackTrace matches what a panic prints.
var stackTrace = regexp.MustCompile(`panic:|goroutine \d+ \[`)

// wantText fails unless text contains every one of want and fits in 80
// columns.
func wantText(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("output lacks %q:\n%s", w, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if len([]rune(line)) > 80 {
			t.Errorf("line wider than 80 columns: %q", line)
		}
	}
}

func TestOverview(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		inStdout bool
	}{
		{"no arguments is a usage error", nil, exitUsage, false},
		{"help", []string{"help"}, exitOK, true},
		{"--help", []string{"--help"}, exitOK, true},
		{"-h", []string{"-h"}, exitOK, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d", code, tt.wantCode)
			}
			text := stderr
			if tt.inStdout {
				text = stdout
			}
			for _, c := range commands {
				if !strings.Contains(text, "  "+c.name+" ") {
					t.Errorf("overview does not list %q:\n%s", c.name, text)
				}
			}
		})
	}
}

func TestHelpForEveryCommand(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				stdout, stderr, code := runCLI(t, args...)
				if code != exitOK || stderr != "" {
					t.Fatalf("exit %d, stderr %q", code, stderr)
				}
				wantText(t, stdout, "Usage: ratebucket "+c.name, "Examples:", "Flags:", "ratebucket "+c.name)
			})
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"bench", "--frob"}, "flag provided but not defined: -frob"},
		{"bad rate", []string{"demo", "--rate", "2/fortnight"}, `invalid value "2/fortnight" for flag -rate`},
		{"zero capacity", []string{"demo", "--capacity", "0"}, "capacity 0 outside"},
		{"capacity not a number", []string{"demo", "--capacity", "lots"}, `invalid value "lots" for flag -capacity`},
		{"negative requests", []string{"demo", "-n", "-5"}, "-n -5"},
		{"per-instance with redis", []string{"demo", "--per-instance", "--redis", "127.0.0.1:1"}, "--per-instance"},
		{"timeout without redis", []string{"demo", "--timeout", "150ms"}, "--timeout bounds Redis calls; it needs --redis"},
		{"negative timeout", []string{"demo", "--timeout", "-1s", "--redis", "127.0.0.1:1"}, "--timeout -1s"},
		{"unknown fail mode", []string{"demo", "--fail", "local"}, `--fail "local": want open or closed`},
		{"bad concurrency", []string{"bench", "--concurrency", "1,x"}, "comma-separated list"},
		{"bad duration", []string{"bench", "--duration", "-1s"}, "--duration -1s"},
		{"stray argument", []string{"bench", "extra"}, `unexpected argument "extra"`},
		{"bad redis url", []string{"bench", "--redis", "http://127.0.0.1:1"}, "--redis"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != exitUsage {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, exitUsage, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			wantOneLine(t, stderr, tt.want)
		})
	}
}

func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantRest string
		wantX    string
	}{
		{"flags first", []string{"-x", "1", "a", "b"}, "a b", "1"},
		{"flags last", []string{"a", "b", "-x", "1"}, "a b", "1"},
		{"flags between", []string{"a", "--x=1", "b"}, "a b", "1"},
		{"double dash ends flags", []string{"a", "--", "-x", "1"}, "a -x 1", ""},
		{"double dash first", []string{"--", "-x"}, "-x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			x := fs.String("x", "", "")
			rest, err := parseInterleaved(fs, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(rest, " "); got != tt.wantRest || *x != tt.wantX {
				t.Fatalf("rest %q x %q, want %q and %q", got, *x, tt.wantRest, tt.wantX)
			}
		})
	}
}
