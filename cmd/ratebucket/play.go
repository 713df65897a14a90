package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/ratebucket/ratebucket/cmd/ratebucket/internal/play"
)

var playCommand = &command{
	name:    "play",
	summary: "the playground: token bucket, fixed and sliding window in your browser",
	usage: `play [--port 8016]

Starts a web server on 127.0.0.1 and prints its URL. Open it: the page runs
the simulator's scenarios (the boundary spike, the phone's feed burst, ...)
or traffic you type or click onto a chart, through the token bucket, the
fixed window and the sliding window side by side, and shows every request
admitted or denied (hover for retry-after, or open the table under a
chart), the room left in each bucket as a line, the windows, and where more
got through than capacity + rate*t. Every view is a URL that reproduces
it. The page is embedded in the binary and fetches nothing from the
network; Ctrl-C stops the server.

Examples:
  ratebucket play
  ratebucket play --port 0     # any free port`,
	flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		port := fs.Int("port", 8016, "port on 127.0.0.1 (0: any free port)")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			if *port < 0 || *port > 65535 {
				return usagef("--port %d: want 0 to 65535", *port)
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
			if err != nil {
				return err
			}
			return servePlay(ctx, e, ln)
		}
	},
}

// servePlay serves the playground on ln until ctx ends, then shuts down,
// letting runs in progress finish for up to 5 seconds.
func servePlay(ctx context.Context, e *env, ln net.Listener) error {
	srv := &http.Server{Handler: play.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stdout, "ratebucket playground: http://%s/\nOpen it in a browser; Ctrl-C stops the server.\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(stop)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
