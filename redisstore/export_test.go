package redisstore

// PipelineState reports how many calls are queued and how many writers
// run, so tests can tell "sent" from "queued" without timing.
func PipelineState(s *Store) (queued, writers int) {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	return len(s.pipe.q), s.pipe.writers
}
