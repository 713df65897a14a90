package rls

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the server's Prometheus metrics. Every label has a bounded
// set of values: domain is a configured domain or "unknown" (a client
// cannot invent label values), result and code are fixed words, and no
// label ever carries a descriptor's key or value.
//
//	ratebucket_rls_decisions_total{domain,result}       per descriptor; result is
//	    ok, over_limit, shadow_over_limit (shadow_mode or quota_mode would have
//	    refused), unlimited or no_limit (matched no rate_limit)
//	ratebucket_rls_requests_total{code}                  per request: ok, over_limit, error
//	ratebucket_rls_store_errors_total{domain}            requests the store could not decide
//	    (answered UNAVAILABLE); a store's refusal of the server's buckets as bad
//	    input is a misconfiguration, answered INTERNAL and counted only as an error
//	    in requests_total
//	ratebucket_rls_request_duration_seconds              ShouldRateLimit latency
//	ratebucket_rls_config_reloads_total{result}          success or error
//	ratebucket_rls_config_last_reload_successful         1 or 0
//	ratebucket_rls_config_domains                        domains loaded
type Metrics struct {
	decisions   *prometheus.CounterVec
	requests    *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	latency     prometheus.Histogram
	reloads     *prometheus.CounterVec
	configOK    prometheus.Gauge
	domains     prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg (for example
// prometheus.NewRegistry()). A nil reg registers nothing: the metrics are
// kept but not exported.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebucket_rls_decisions_total",
			Help: "Descriptors decided, by domain (a configured one, or unknown) and result.",
		}, []string{"domain", "result"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebucket_rls_requests_total",
			Help: "ShouldRateLimit calls by overall outcome: ok, over_limit or error.",
		}, []string{"code"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebucket_rls_store_errors_total",
			Help: "Requests the store could not decide (answered UNAVAILABLE), by domain.",
		}, []string{"domain"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratebucket_rls_request_duration_seconds",
			Help:    "ShouldRateLimit latency in the server, store call included.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebucket_rls_config_reloads_total",
			Help: "Configuration reloads by result: success, or error (the previous configuration stays).",
		}, []string{"result"}),
		configOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratebucket_rls_config_last_reload_successful",
			Help: "1 if the last configuration reload succeeded, 0 if it failed and an older configuration is in use.",
		}),
		domains: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratebucket_rls_config_domains",
			Help: "Domains in the configuration in use.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.decisions, m.requests, m.storeErrors, m.latency, m.reloads, m.configOK, m.domains} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Decision results, the values of the result label.
const (
	resultOK         = "ok"
	resultOver       = "over_limit"
	resultShadowOver = "shadow_over_limit"
	resultUnlimited  = "unlimited"
	resultNoLimit    = "no_limit"
)

// reloaded records a reload's outcome; c is the configuration in use
// afterwards.
func (m *Metrics) reloaded(ok bool, c *Config) {
	if m == nil {
		return
	}
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.configOK.Set(1)
	} else {
		m.reloads.WithLabelValues("error").Inc()
		m.configOK.Set(0)
	}
	if c != nil {
		m.domains.Set(float64(len(c.domains)))
	}
}
