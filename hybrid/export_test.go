package hybrid

// PlantNoPause turns l's pause on a dry key off: every request its batch
// cannot cover calls the primary (the behaviour before issue 29).
func PlantNoPause(l *Leases) { l.nopause = true }

// LeaseChunks returns how many chunks of entries l's shards hold.
func LeaseChunks(l *Leases) int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.chunks)
		sh.mu.Unlock()
	}
	return n
}
