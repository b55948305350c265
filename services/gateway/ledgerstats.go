package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/admission/reserve"
)

// ledgerCollectors exports what the ledger client did about a broker that
// did not deliver (reserve.Stats): reports retried, dropped from a full
// retry queue or given up, produces abandoned at the request's bound, and
// late grants given back. None for a nil client (tests without Kafka).
func ledgerCollectors(rc *reserve.Client) []prometheus.Collector {
	if rc == nil {
		return nil
	}
	counter := func(name, help string, v func(reserve.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(rc.Stats())) })
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gateway_reports_retry_queued",
			Help: "Reports (Released, Reconciled, ProviderRejected, emergency reserves) that failed to produce and wait for a retry."},
			func() float64 { return float64(rc.Stats().RetryQueued) }),
		counter("sluice_gateway_reports_retried_total", "Reports delivered after at least one retry.",
			func(s reserve.Stats) int64 { return s.Retried }),
		counter("sluice_gateway_reports_retry_dropped_total", "Reports dropped because the retry queue was full (retry_queue_max): their grants wait out the hold TTL.",
			func(s reserve.Stats) int64 { return s.RetryDropped }),
		counter("sluice_gateway_reports_retry_expired_total", "Reports given up after retrying until their reservation had ended.",
			func(s reserve.Stats) int64 { return s.RetryExpired }),
		counter("sluice_gateway_ledger_produce_abandoned_total", "Reservations whose produce was not acked within ledger_timeout_ms or the deadline (answered 503 ledger_unavailable, given back by a Released behind them).",
			func(s reserve.Stats) int64 { return s.Abandoned }),
		counter("sluice_gateway_ledger_produce_requests_total", "Produce requests the ledger client's request producer wrote to the brokers (issue 25: about one per admitted request, its Reconciled riding with the next reserve).",
			func(s reserve.Stats) int64 { return s.ProduceRequests }),
		counter("sluice_gateway_late_grants_released_total", "Grants that reached the gateway for an attempt it had given up, released undispatched.",
			func(s reserve.Stats) int64 { return s.LateReleased }),
	}
}
