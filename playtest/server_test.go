package playtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// playServer is `ratebucket play` running as a person runs it: the binary
// built from this repository's cmd/ratebucket, serving on a free loopback
// port.
type playServer struct {
	cmd    *exec.Cmd
	dir    string       // the build's temporary directory
	stderr lockedBuffer // what the process wrote to stderr
	done   chan error   // the process's end, once
}

// lockedBuffer is a bytes.Buffer the process's output goroutines and the
// test may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPlay builds cmd/ratebucket (with the race detector when the tests
// have it, so the server's races fail the tests too) and starts
// `ratebucket play --port 0`. It returns the server and the base URL it
// printed, such as http://127.0.0.1:40123.
func startPlay() (*playServer, string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, "", fmt.Errorf("the go command is not on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "playtest-bin-")
	if err != nil {
		return nil, "", err
	}
	bin := filepath.Join(dir, "ratebucket")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command(goTool, append(args, "./cmd/ratebucket")...)
	build.Dir = ".." // the repository's root: its own module, not this one
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("go build ./cmd/ratebucket: %w\n%s", err, out)
	}
	s := &playServer{cmd: exec.Command(bin, "play", "--port", "0"), dir: dir, done: make(chan error, 1)}
	s.cmd.Stderr = &s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default: // later lines: read so that the process never blocks
			}
		}
		s.done <- s.cmd.Wait()
	}()
	select {
	case line := <-first:
		// "ratebucket playground: http://127.0.0.1:PORT/"
		url, ok := strings.CutPrefix(line, "ratebucket playground: ")
		if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
			return nil, "", errors.Join(fmt.Errorf("ratebucket play printed %q, want its URL", line), s.stop())
		}
		return s, strings.TrimSuffix(url, "/"), nil
	case <-time.After(60 * time.Second):
		return nil, "", errors.Join(errors.New("ratebucket play printed no URL within 60 s"), s.stop())
	}
}

// stop interrupts the server as Ctrl-C does and reports how it ended: an
// error unless it exited 0 with nothing on stderr (a race report would be
// there).
func (s *playServer) stop() error {
	defer os.RemoveAll(s.dir)
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		return err
	}
	var err error
	select {
	case err = <-s.done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		err = errors.Join(errors.New("ratebucket play did not stop within 20 s of an interrupt"), <-s.done)
	}
	if msg := s.stderr.String(); msg != "" {
		err = errors.Join(err, fmt.Errorf("ratebucket play wrote to stderr:\n%s", msg))
	}
	return err
}
