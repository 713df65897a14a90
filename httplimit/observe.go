package httplimit

import (
	"context"
	"net/http"

	"github.com/ratebucket/ratebucket/observe"
)

// The middleware reports its store calls through the observer contract of
// package observe: observe the Store (observe.Wrap(s, "redis", obs)) and
// every decision comes with the request's route pattern and the deciding
// limit's name, as observe.Labels. Config.Observer still receives an Event
// per request, with the outcomes that are the middleware's own (skipped,
// invalid, failed open or closed).

// limitLabels returns the labels of the enforced limits' store call over
// ls: each enforced limit's name, in order (a shadow limit's take is a
// call of its own); the route is the request's.
func limitLabels(ls []limit) observe.Labels {
	names := make([]string, 0, len(ls))
	for _, l := range ls {
		if !l.shadow {
			names = append(names, l.name)
		}
	}
	if len(names) == 0 {
		return observe.Labels{}
	}
	return observe.Labels{Policy: names[0], Policies: names}
}

// labelled returns the context of r's store call: r's, carrying m's labels
// and r's route pattern when some store of the process is observed (one
// small allocation), and r's as it is otherwise.
func (m *Middleware) labelled(r *http.Request) context.Context {
	if !observe.Active() {
		return r.Context()
	}
	l := m.labels
	l.Route = r.Pattern
	return observe.WithLabels(r.Context(), l)
}

// limitContext returns the context of a Take of limit i alone (the
// in-order path), labelled with that limit's name when ctx has labels.
func limitContext(ctx context.Context, i int) context.Context {
	l, ok := observe.LabelsFrom(ctx)
	if !ok || i == 0 || i >= len(l.Policies) {
		return ctx
	}
	l.Policy = l.Policies[i]
	return observe.WithLabels(ctx, l)
}
