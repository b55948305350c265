package ledgerd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/ledger"
)

type metrics struct {
	decisions *prometheus.CounterVec
	applied   prometheus.Counter
	invalid   prometheus.Counter
	aborts    prometheus.Counter
	ticks     prometheus.Counter
	snapshots prometheus.Counter
	lag       *prometheus.GaugeVec
	catchUp   prometheus.Histogram
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_ledger_decisions_total", Help: "Decisions by status and limiting dimension."}, []string{"status", "dimension"}),
		applied:   prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_events_applied_total", Help: "Input events applied and committed."}),
		invalid:   prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_invalid_records_total", Help: "Undecodable input records (applied as no-op ticks)."}),
		aborts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_transaction_aborts_total", Help: "Aborted ledger transactions."}),
		ticks:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_ticks_total", Help: "Tick records appended."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_snapshots_total", Help: "Snapshots written."}),
		lag:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_ledger_partition_lag", Help: "High watermark minus next offset to apply."}, []string{"partition"}),
		catchUp:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_ledger_catchup_seconds", Help: "Time to restore a partition from snapshot and replay its tail.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.applied, m.invalid, m.aborts, m.ticks, m.snapshots, m.lag, m.catchUp} {
		_ = r.Register(c) // a second service in one process shares the first's collectors
	}
	return m
}

func (m *metrics) decision(o *ledger.Output) {
	m.decisions.WithLabelValues(string(o.Decision.Status), string(o.Decision.LimitDimension)).Inc()
}
