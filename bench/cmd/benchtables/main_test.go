package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestTables feeds six runs of two implementations and checks the medians,
// the ratio of medians and the spread that reach the tables.
func TestTables(t *testing.T) {
	var in strings.Builder
	for _, ns := range []float64{100, 101, 99, 100, 102, 98} {
		fmt.Fprintf(&in, "BenchmarkHotKey/policy=deny/impl=ratebucket-2\t1000\t%v ns/op\t0 B/op\t0 allocs/op\n", ns)
		fmt.Fprintf(&in, "BenchmarkHotKey/policy=deny/impl=peer-2\t1000\t%v ns/op\t16 B/op\t1 allocs/op\n", 2*ns)
	}
	for _, v := range []float64{50000, 51000, 49000, 50000, 50500, 49500} {
		fmt.Fprintf(&in, "BenchmarkRedis/keys=distinct/conc=64/impl=ratebucket\t1\t%v checks/s\t40 p50-us\t90 p99-us\n", v)
		fmt.Fprintf(&in, "BenchmarkRedis/keys=distinct/conc=64/impl=redis_rate\t1\t%v checks/s\t60 p50-us\t99 p99-us\n", v/2)
		fmt.Fprintf(&in, "BenchmarkRedisCeiling/script=ratebucket/c=64/P=1\t1\t%v checks/s\t30 p50-us\t80 p99-us\n", v*1.25)
	}
	s := &samples{impls: map[string][]string{}, vals: map[string]map[string]map[string][]float64{}}
	if err := s.read(strings.NewReader(in.String()), "test"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s.write(&out)
	for _, want := range []string{
		"| deny | ratebucket | 100 ±", // median of the six runs
		"| deny | peer | 200 ±",       // the peer's median, 2× slower
		"| HotKey/policy=deny | 100 | 0 | peer 200 | 2.00× |",
		"| 64 | ratebucket | 50.0k ±",
		"| 64 | redis_rate | 25.0k ±",
		"| ratebucket ÷ redis_rate throughput, 64 goroutines, distinct keys | 2.00× | > 1 |",
		"(c=64/P=1) | 0.80× | ≥ 0.9 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, out.String())
		}
	}
	var svg bytes.Buffer
	if err := s.writeSVG(&svg); err != nil || !strings.Contains(svg.String(), "<polyline") {
		t.Fatalf("writeSVG: %v\n%s", err, svg.String())
	}
}
