package hybrid

// PlantFreeBatches makes l give each batch back as soon as it is granted
// and spend it all the same: an over-admission (a batch not charged) the
// bound's tests must catch.
func PlantFreeBatches(l *Leases) { l.free = true }

// PlantNoPause turns l's pause on a dry key off: every request its batch
// cannot cover calls the primary (the behaviour before issue 29).
func PlantNoPause(l *Leases) { l.nopause = true }
