package redisstore

// NoFailoverReload turns off s's cluster state reloads on connection
// errors, for the control test that shows the stall without them. Call it
// before s is used.
func NoFailoverReload(s *Store) {
	s.fo = nil
	if s.pipe != nil {
		s.pipe.fo = nil
	}
}

// FailoverReloads returns how many cluster state reloads s has asked for.
func FailoverReloads(s *Store) int64 {
	if s.fo == nil {
		return 0
	}
	return s.fo.reloads.Load()
}

// NodeLost is nodeLost, the test of an error that asks for a reload.
var NodeLost = nodeLost
