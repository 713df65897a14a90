package main

import (
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// The demo's /metrics: every instance serves the process's metrics (the
// instances share one process), written by observe/promtext in the
// Prometheus text format, since this module's go.mod must not require
// client_golang. They are the metrics of contrib/prometheus, fed by the
// same observer contract: the store wrapped with observe.Wrap, and
// redisstore's pipeline batches.

// observedStore returns be's store reporting to the fleet's metrics, named
// after its kind: "memory" or "redis".
func (f *demoFleet) observedStore(be *backend) store.Store {
	name := "memory"
	if be.onRedis() {
		name = "redis"
	}
	return observe.Wrap(be.store, name, f.metrics)
}
