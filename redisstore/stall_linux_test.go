//go:build linux

package redisstore_test

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// stall stops the redis-server that rdb talks to (SIGSTOP): it reads,
// runs and answers nothing, while the kernel still accepts connections
// and buffers what clients write, as during DEBUG SLEEP. It returns once
// the process is stopped, with resume, which continues it (SIGCONT); the
// test's cleanup resumes it too. Unlike DEBUG SLEEP the stall has no
// length: it lasts until the test has seen what it waits for. It skips
// the test unless the server is a child of the test process (an external
// server's process_id means nothing here).
func stall(t *testing.T, rdb *redis.Client) (resume func()) {
	t.Helper()
	info, err := rdb.Info(ctxT(t), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	m := regexp.MustCompile(`process_id:(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("INFO server has no process_id")
	}
	pid, _ := strconv.Atoi(m[1])
	if _, ppid := procStat(t, pid); ppid != os.Getpid() {
		t.Skipf("redis-server %d is not a child of this test: stalling needs a local server", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server %d: %v", pid, err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT redis-server %d: %v", pid, err)
			}
		})
	}
	t.Cleanup(resume)
	// The signal is delivered asynchronously: wait for the stopped state.
	if !poll(func() bool { state, _ := procStat(t, pid); return state == "T" }) {
		t.Fatalf("redis-server %d did not stop", pid)
	}
	return resume
}

// procStat returns the state and parent pid of process pid, from
// /proc/pid/stat, where they follow the command name in parentheses.
func procStat(t *testing.T, pid int) (state string, ppid int) {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	if len(f) < 2 {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	ppid, _ = strconv.Atoi(string(f[1]))
	return string(f[0]), ppid
}
