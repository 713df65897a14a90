package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestPlayServes starts the playground as the subcommand does, asks its
// API for a run, and stops it by cancelling the context, as Ctrl-C does.
func TestPlayServes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- servePlay(ctx, &env{stdout: &out, stderr: io.Discard}, ln) }()
	base := "http://" + ln.Addr().String()
	resp, err := http.Get(base + "/api/run?scenario=sensor&duration=10s&algos=token")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"tokenbucket"`) {
		t.Errorf("GET /api/run: %d %.200s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("servePlay after cancel: %v", err)
	}
	wantText(t, out.String(), "ratebucket playground: "+base+"/")
}

func TestPlayUsage(t *testing.T) {
	for _, args := range [][]string{{"play", "now"}, {"play", "--port", "70000"}} {
		_, stderr, code := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
		wantOneLine(t, stderr, "play")
	}
}
