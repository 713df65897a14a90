package rls

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Loader holds the configuration in use and replaces it when asked to
// reload. A request reads the configuration once, through one atomic
// load, so a reload never drops or blocks a request: requests that began
// before it finish on the old configuration, later ones see the new one.
// A file that fails to load leaves the old configuration in use, and is
// logged and counted (ratebucket_rls_config_reloads_total{result="error"},
// ratebucket_rls_config_last_reload_successful 0).
//
// A Loader is safe for simultaneous use by multiple goroutines.
type Loader struct {
	path    string
	cur     atomic.Pointer[Config]
	metrics *Metrics
	logger  *slog.Logger
	mu      sync.Mutex // serialises reloads
	// OnReload, if set before the first reload, is called after each
	// reload with its error (nil on success).
	OnReload func(error)
}

// NewLoader loads the configuration at path (see [Load]). The first load
// must succeed: a server with no configuration would answer nothing
// meaningful.
func NewLoader(path string, m *Metrics, logger *slog.Logger) (*Loader, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	l := &Loader{path: path, metrics: m, logger: logger}
	l.cur.Store(c)
	m.reloaded(true, c)
	return l, nil
}

// Config returns the configuration in use.
func (l *Loader) Config() *Config { return l.cur.Load() }

// Reload loads the configuration again. On success the new one is in use
// when Reload returns; on failure the old one stays and the error (a
// [*ConfigError] naming the file and line) is returned, logged and
// counted.
func (l *Loader) Reload() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, err := Load(l.path)
	if err != nil {
		l.logger.Error("rls: configuration not reloaded; the previous one stays in use", "err", err)
		l.metrics.reloaded(false, nil)
	} else {
		l.cur.Store(c)
		l.logger.Info("rls: configuration reloaded", "domains", len(c.domains), "files", len(c.files))
		l.metrics.reloaded(true, c)
	}
	if l.OnReload != nil {
		l.OnReload(err)
	}
	return err
}

// Watch reloads the configuration whenever trigger receives, until ctx
// ends. The command line feeds it from file changes ([WatchFiles]) and
// SIGHUP; tests feed it directly.
func (l *Loader) Watch(ctx context.Context, trigger <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-trigger:
			l.Reload()
		}
	}
}

// WatchFiles sends on the returned channel when a file in the loader's
// directory (the file's own directory, for a single file) is written,
// created, renamed or removed: that covers editors that write in place,
// those that write a new file and rename it, and Kubernetes ConfigMaps,
// which swap a symlink. Events closer together than settle are sent as
// one, settle after the last, so a reload does not read a half-written
// file. It stops when ctx ends.
func (l *Loader) WatchFiles(ctx context.Context, settle time.Duration) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	dir := l.path
	if c := l.Config(); len(c.files) == 1 && c.files[0] == l.path {
		dir = filepath.Dir(l.path)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op == fsnotify.Chmod {
					continue
				}
				if timer == nil {
					timer = time.NewTimer(settle)
				} else {
					timer.Reset(settle)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				l.logger.Warn("rls: watching the configuration", "err", err)
			case <-fire:
				fire = nil
				select {
				case out <- struct{}{}:
				default: // a reload is already pending
				}
			}
		}
	}()
	return out, nil
}
