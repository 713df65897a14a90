//go:build race

package playtest

// raceEnabled reports that the tests run with the race detector.
const raceEnabled = true
