package redisstore

import "time"

// Expire runs the pipeline's alarm as if it rang at now: it signals every
// timed call waiting whose deadline (the store's Timeout) is not after
// now, so tests need not wait for a Timeout to pass.
func Expire(s *Store, now time.Time) {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	s.pipe.expire(now)
}

// Listed reports how many timed calls the pipeline's alarm watches.
func Listed(s *Store) int {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	n := 0
	for c := s.pipe.head; c != nil; c = c.next {
		n++
	}
	return n
}
