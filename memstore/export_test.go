package memstore

// NewSweeping is New with shards that sweep from floor buckets on, instead
// of 1024, so that tests exercise sweeping with few keys.
func NewSweeping(cfg Config, floor int) (*Store, error) { return newStore(cfg, floor) }

// Shards returns the number of shards.
func (s *Store) Shards() int { return len(s.shards) }
