package redisstore

import "github.com/ratebucket/ratebucket/observe"

// DefaultName is the store's name in its events, for a Config without
// Name.
const DefaultName = "redis"

// batchObserver reports the size of each pipeline sent; the zero value
// reports nothing.
type batchObserver struct {
	o    observe.Observer
	name string
}

func newBatchObserver(cfg Config) batchObserver {
	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	return batchObserver{o: cfg.Observer, name: name}
}

// batch reports a pipeline of n calls: n commands in one round trip.
func (b batchObserver) batch(n int) {
	if b.o != nil {
		b.o.ObservePipelineBatch(observe.PipelineBatch{Store: b.name, Size: n})
	}
}
