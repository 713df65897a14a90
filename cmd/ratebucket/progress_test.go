package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBar(t *testing.T) {
	tests := []struct {
		name        string
		done, total int64
		want        string
	}{
		{"empty", 0, 1000, "[..........]   0% 0/1000"},
		{"half", 500, 1000, "[#####.....]  50% 500/1000"},
		{"full", 1000, 1000, "[##########] 100% 1000/1000"},
		{"overshoot is clamped", 1200, 1000, "[##########] 100% 1000/1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bar(tt.done, tt.total, 10); got != tt.want {
				t.Fatalf("bar(%d, %d) = %q, want %q", tt.done, tt.total, got, tt.want)
			}
		})
	}
}

func TestProgressOnlyOnTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := startProgress(&buf, 10, "requests")
	p.add(10)
	p.finish()
	if buf.Len() != 0 {
		t.Fatalf("progress wrote %q to a non-terminal", buf.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("a regular file counts as a terminal")
	}
}

// TestProgressBar draws a bar on a buffer (as on a terminal) and finishes it
// twice, as a deferred finish after an explicit one does.
func TestProgressBar(t *testing.T) {
	var buf syncBuffer
	p := startBar(&buf, 4, "runs", time.Hour) // no tick: finish draws
	p.add(3)
	p.finish()
	p.finish()
	if got := buf.String(); !strings.Contains(got, "\r[######################........]  75% 3/4 runs") || !strings.HasSuffix(got, "\r") {
		t.Fatalf("bar output %q", got)
	}
}

// syncBuffer is a strings.Builder safe for simultaneous use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
