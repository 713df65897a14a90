package promobserver_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// family gathers reg and returns the named family.
func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("no family %s gathered", name)
	return nil
}

// histogram returns the one histogram of the named family.
func histogram(t *testing.T, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	f := family(t, reg, name)
	if len(f.GetMetric()) != 1 {
		t.Fatalf("%s has %d series, want 1", name, len(f.GetMetric()))
	}
	return f.GetMetric()[0].GetHistogram()
}

// counter returns a collector of the sum of the named counter family over
// the series whose result label is result (every series when empty).
func counter(t *testing.T, reg *prometheus.Registry, name, result string) prometheus.Collector {
	t.Helper()
	sum := 0.0
	for _, m := range family(t, reg, name).GetMetric() {
		ok := result == ""
		for _, l := range m.GetLabel() {
			ok = ok || l.GetName() == "result" && l.GetValue() == result
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sum"}, func() float64 { return sum })
}
