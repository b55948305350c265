package gateway

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// children caches the children of a metric vector by key. WithLabelValues
// hashes its labels and takes the vector's lock on every call; a request
// counts several metrics, so the gateway looks each child up once per key
// and reads it from a sync.Map afterwards (read-mostly: no lock, no
// allocation). Keys are bounded by the configuration (outcomes, providers,
// statuses, tenants), as the vector's children are.
type children[K comparable, V any] struct {
	m    sync.Map // K → V
	make func(K) V
}

func (c *children[K, V]) get(k K) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	v, _ := c.m.LoadOrStore(k, c.make(k))
	return v.(V)
}

// attemptKey labels sluice_gateway_upstream_attempts_total; status 0 is
// "error" (no answer).
type attemptKey struct {
	provider string
	status   int
}

// tokenCounters are one tenant's children of sluice_gateway_tokens_total
// and sluice_gateway_spend_micro_usd_total.
type tokenCounters struct{ inEst, inAct, outEst, outAct, spend prometheus.Counter }

// tenantOutcome labels sluice_gateway_tenant_requests_total.
type tenantOutcome struct{ tenant, outcome string }

// metricCache holds the cached children of the gateway's hot-path metrics.
type metricCache struct {
	requests children[string, prometheus.Counter]
	attempts children[attemptKey, prometheus.Counter]
	tokens   children[string, *tokenCounters]
	// tenantRequests' keys are bounded by the tenants and the stable codes.
	tenantRequests children[tenantOutcome, prometheus.Counter]
}

func newMetricCache(m *metrics) *metricCache {
	c := &metricCache{}
	c.requests.make = func(outcome string) prometheus.Counter { return m.requests.WithLabelValues(outcome) }
	c.attempts.make = func(k attemptKey) prometheus.Counter {
		status := "error"
		if k.status != 0 {
			status = strconv.Itoa(k.status)
		}
		return m.attempts.WithLabelValues(k.provider, status)
	}
	c.tokens.make = func(tenant string) *tokenCounters {
		return &tokenCounters{inEst: m.tokens.WithLabelValues(tenant, "input", "estimated"), inAct: m.tokens.WithLabelValues(tenant, "input", "actual"),
			outEst: m.tokens.WithLabelValues(tenant, "output", "estimated"), outAct: m.tokens.WithLabelValues(tenant, "output", "actual"),
			spend: m.spend.WithLabelValues(tenant)}
	}
	c.tenantRequests.make = func(k tenantOutcome) prometheus.Counter { return m.tenantRequests.WithLabelValues(k.tenant, k.outcome) }
	return c
}
