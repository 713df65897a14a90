package hybrid

// PlantFreeBatches makes l give each batch back as soon as it is granted
// and spend it all the same: an over-admission (a batch not charged) the
// bound's tests must catch.
func PlantFreeBatches(l *Leases) { l.free = true }
