package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// isTerminal reports whether w is a terminal (a character device), the
// only place a progress bar belongs: redirected to a file or a pipe it
// would be noise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress draws a one-line bar, redrawn in place ten times a second, of
// done out of total. The zero value is not usable; see startProgress.
type progress struct {
	w     io.Writer
	total int64
	label string
	done  atomic.Int64
	stop  chan struct{} // nil when no bar is drawn
	wg    sync.WaitGroup
	once  sync.Once
}

// startProgress starts a bar on w when w is a terminal; otherwise it
// returns a progress whose add and finish only count. finish must be
// called.
func startProgress(w io.Writer, total int64, label string) *progress {
	if !isTerminal(w) || total <= 0 {
		return &progress{w: w, total: total, label: label}
	}
	return startBar(w, total, label, 100*time.Millisecond)
}

// startBar starts a bar on w redrawn every interval, terminal or not.
func startBar(w io.Writer, total int64, label string, interval time.Duration) *progress {
	p := &progress{w: w, total: total, label: label, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

// add counts n more units done.
func (p *progress) add(n int64) { p.done.Add(n) }

// finish stops the bar, draws it a last time and clears its line. Calling
// it again does nothing.
func (p *progress) finish() {
	if p.stop == nil {
		return
	}
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		p.draw()
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 60))
	})
}

// draw writes the bar once.
func (p *progress) draw() {
	fmt.Fprint(p.w, "\r"+bar(p.done.Load(), p.total, 30)+" "+p.label)
}

// bar renders done/total as "[#####.....]  50% 500/1000".
func bar(done, total int64, width int) string {
	done = min(max(done, 0), total)
	filled := int(done * int64(width) / total)
	return fmt.Sprintf("[%s%s] %3d%% %d/%d", strings.Repeat("#", filled),
		strings.Repeat(".", width-filled), done*100/total, done, total)
}
