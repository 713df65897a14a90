package sim

import (
	"testing"
	"time"
)

// BenchmarkHour measures simulated hours: one of 5,000 clients (the mobile
// scenario at Scale 50) and one of the abuser at 18,000 requests a minute
// (about a million requests). It reports requests simulated per second of
// real time.
func BenchmarkHour(b *testing.B) {
	for _, cfg := range []Config{
		{Scenario: "mobile", Scale: 50, Duration: time.Hour, Instances: 3},
		{Scenario: "abuser", Duration: time.Hour, Instances: 3},
	} {
		b.Run(cfg.Scenario, func(b *testing.B) {
			var n int64
			for b.Loop() {
				rep, err := run1(cfg)
				if err != nil {
					b.Fatal(err)
				}
				n += rep.Total.Requests
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "requests/s")
			b.ReportMetric(float64(n)/float64(b.N), "requests/run")
		})
	}
}
