package main

import (
	"strings"
	"testing"
)

// benchRows returns the table rows of bench output, keyed by goroutines.
func benchRows(t *testing.T, stdout string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] != "goroutines" {
			rows[f[0]] = f
		}
	}
	return rows
}

func TestBenchMemstore(t *testing.T) {
	stdout, stderr, code := runCLI(t, "bench", "--duration", "30ms", "--concurrency", "1,4", "--keys", "10", "--capacity", "5", "--rate", "1/s")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "bench: memstore (in-process), policy burst 5, 1/1s, 10 key(s)") {
		t.Fatalf("header missing:\n%s", stdout)
	}
	rows := benchRows(t, stdout)
	for _, g := range []string{"1", "4"} {
		r, ok := rows[g]
		if !ok {
			t.Fatalf("no row for %s goroutines:\n%s", g, stdout)
		}
		// 10 keys of 5 tokens, refilled 1 per second: in a 30ms run
		// almost every call is denied; the share admitted is tiny but
		// the calls per second are not.
		if r[1] == "0.00" || !strings.HasSuffix(r[5], "%") || r[5] == "100.0%" {
			t.Errorf("row %v: want a positive call rate and a small admitted share", r)
		}
	}
}

func TestBenchHotKey(t *testing.T) {
	stdout, _, code := runCLI(t, "bench", "--duration", "20ms", "--concurrency", "2", "--keys", "1")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	if _, ok := benchRows(t, stdout)["2"]; !ok || !strings.Contains(stdout, "1 key(s)") {
		t.Fatalf("hot-key run:\n%s", stdout)
	}
}
