package hybrid

// PlantNoPause turns l's pause on a dry key off: every request its batch
// cannot cover calls the primary (the behaviour before issue 29).
func PlantNoPause(l *Leases) { l.nopause = true }
