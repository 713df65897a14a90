package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRedisStart reports a redis-server that could not be started.
var ErrRedisStart = errors.New("bench: redis-server did not start (apt-get install redis-server redis-tools)")

// RedisServer is a redis-server started by [StartRedis] on a free
// 127.0.0.1 port, with persistence off. Stop it with Stop.
type RedisServer struct {
	// Addr is the server's 127.0.0.1:port.
	Addr string
	cmd  *exec.Cmd
	done chan error
}

// StartRedis starts redis-server in dir and waits until it answers PING.
// The server dies with this process (parent-death signal), so a benchmark
// that is killed leaves nothing behind.
func StartRedis(dir string) (*RedisServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisStart, err)
	}
	s := &RedisServer{Addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case werr := <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("%w: exited (%v): %s", ErrRedisStart, werr, strings.TrimSpace(string(log)))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%w: no PING answer on %s: %v", ErrRedisStart, s.Addr, err)
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (s *RedisServer) Stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	return nil
}

// RedisVersion returns the server's redis_version from INFO.
func RedisVersion(ctx context.Context, c redis.UniversalClient) (string, error) {
	return infoField(ctx, c, "server", "redis_version")
}

// UsedMemory returns the server's used_memory in bytes.
func UsedMemory(ctx context.Context, c redis.UniversalClient) (int64, error) {
	v, err := infoField(ctx, c, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// ServerCPU returns the CPU time the server process has used (INFO cpu:
// used_cpu_user + used_cpu_sys), in seconds. Its growth over a measurement
// divided by the checks made is the server's cost per check, round-trip
// handling included.
func ServerCPU(ctx context.Context, c redis.UniversalClient) (float64, error) {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := infoField(ctx, c, "cpu", f)
		if err != nil {
			return 0, err
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: INFO cpu %s: %w", f, err)
		}
		total += x
	}
	return total, nil
}

// infoField returns one field of INFO section.
func infoField(ctx context.Context, c redis.UniversalClient, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("bench: INFO %s has no %s", section, field)
}
