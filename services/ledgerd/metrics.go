package ledgerd

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

type metrics struct {
	decisions *prometheus.CounterVec
	decCtr    decisionCounters           // decisions by label pair, cached (encode.go)
	lagBy     map[int32]prometheus.Gauge // lag by partition, cached (encode.go)
	applied   prometheus.Counter
	invalid   prometheus.Counter
	aborts    prometheus.Counter
	// transactions counts committed transactions; rebuilds counts
	// partitions restored from a snapshot and the log (assignment, or an
	// abort whose outcome was unknown).
	transactions prometheus.Counter
	rebuilds     prometheus.Counter
	// nodeLost counts reservations expired because their gateway stopped
	// heartbeating (reason node_lost).
	nodeLost prometheus.Counter
	// ungrantedUsage counts reconciles on reservations the log never
	// granted, charged as debt (ledger/debt.go).
	ungrantedUsage prometheus.Counter
	// leaseMessages counts the lease messages of cross-scope budgets
	// produced (lease.go).
	leaseMessages prometheus.Counter
	ticks         prometheus.Counter
	snapshots     prometheus.Counter
	// snapshotsSkipped counts snapshots larger than bus.SnapshotMaxBytes.
	snapshotsSkipped prometheus.Counter
	lag              *prometheus.GaugeVec
	catchUp          prometheus.Histogram
	// commitSeconds is the time a transaction's end takes (flush, offset
	// commit, heartbeat, EndTxn): the loop applies nothing meanwhile.
	commitSeconds prometheus.Histogram
	queue         *prometheus.GaugeVec
	oldest        *prometheus.GaugeVec
	snapAge       *prometheus.GaugeVec
	// snapBytes is the size of each partition's last committed snapshot
	// record (gzipped unless Config.SnapshotPlain).
	snapBytes *prometheus.GaugeVec
	// fatalErrors counts errors that made the session unusable (classify),
	// recreates the sessions recreated after one.
	fatalErrors prometheus.Counter
	recreates   prometheus.Counter
	// configRefused counts ConfigChanged records not applied, by reason:
	// their signature, a rollback, an invalid document (configauth.go).
	configRefused *prometheus.CounterVec
	// peerEvictions counts silent peers this member fenced and removed
	// from the group (liveness.go).
	peerEvictions prometheus.Counter
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		decisions:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_ledger_decisions_total", Help: "Decisions by status and limiting dimension."}, []string{"status", "dimension"}),
		applied:          prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_events_applied_total", Help: "Input events applied and committed."}),
		invalid:          prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_invalid_records_total", Help: "Undecodable input records (applied as no-op ticks)."}),
		aborts:           prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_transaction_aborts_total", Help: "Aborted ledger transactions."}),
		transactions:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_transactions_total", Help: "Committed ledger transactions."}),
		rebuilds:         prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_partition_rebuilds_total", Help: "Partitions restored from snapshot and log (assignment or unknown transaction outcome)."}),
		nodeLost:         prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_node_lost_reservations_total", Help: "Reservations expired because their gateway stopped heartbeating (node_lost)."}),
		leaseMessages:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_lease_messages_total", Help: "Lease messages of cross-scope budgets produced (LeaseRequested, LeaseGranted, LeaseReturned)."}),
		ungrantedUsage:   prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_ungranted_usage_total", Help: "Reconciles on reservations the committed log never granted; their usage was charged as debt."}),
		ticks:            prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_ticks_total", Help: "Tick records appended."}),
		snapshots:        prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_snapshots_total", Help: "Snapshots committed."}),
		snapshotsSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_snapshots_skipped_total", Help: "Snapshots not written because they exceeded the record size limit."}),
		lag:              prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_ledger_partition_lag", Help: "High watermark minus next offset to apply."}, []string{"partition"}),
		queue:            prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_ledger_queue_depth", Help: "Queued requests per partition and traffic class."}, []string{"partition", "class"}),
		oldest:           prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_ledger_queue_oldest_wait_seconds", Help: "Log-time wait of the oldest queued request per partition and class."}, []string{"partition", "class"}),
		fatalErrors:      prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_session_fatal_errors_total", Help: "Errors that made the transactional session unusable (fenced producer, refused authorization, aborts without end)."}),
		recreates:        prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_session_recreates_total", Help: "Transactional sessions recreated after a fatal error."}),
		peerEvictions:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_peer_evictions_total", Help: "Silent peers this member fenced and removed from the group (a crashed member found before the session timeout)."}),
		snapBytes:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_ledger_snapshot_bytes", Help: "Size of the partition's last committed snapshot record (gzipped state unless --snapshot-plain)."}, []string{"partition"}),
		snapAge:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_ledger_snapshot_age_seconds", Help: "Time since the partition's last snapshot (or since it was assigned)."}, []string{"partition"}),
		configRefused:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_ledger_config_refused_total", Help: "ConfigChanged records not applied: no valid admin signature (unsigned, unknown_key, bad_signature), a signed change older than the one in force (rollback), or a document that does not validate (invalid)."}, []string{"reason"}),
		catchUp:          prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_ledger_catchup_seconds", Help: "Time to restore a partition from snapshot and replay its tail.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		commitSeconds:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_ledger_commit_seconds", Help: "Time to end a ledger transaction (flush, offset commit, heartbeat, EndTxn).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	m.decisions = register(r, m.decisions)
	m.applied = register(r, m.applied)
	m.invalid = register(r, m.invalid)
	m.aborts = register(r, m.aborts)
	m.ticks = register(r, m.ticks)
	m.transactions = register(r, m.transactions)
	m.rebuilds = register(r, m.rebuilds)
	m.nodeLost = register(r, m.nodeLost)
	m.ungrantedUsage = register(r, m.ungrantedUsage)
	m.leaseMessages = register(r, m.leaseMessages)
	m.snapshots = register(r, m.snapshots)
	m.snapshotsSkipped = register(r, m.snapshotsSkipped)
	m.lag = register(r, m.lag)
	m.catchUp = register(r, m.catchUp)
	m.commitSeconds = register(r, m.commitSeconds)
	m.queue = register(r, m.queue)
	m.oldest = register(r, m.oldest)
	m.snapAge = register(r, m.snapAge)
	m.snapBytes = register(r, m.snapBytes)
	m.fatalErrors = register(r, m.fatalErrors)
	m.recreates = register(r, m.recreates)
	m.configRefused = register(r, m.configRefused)
	m.peerEvictions = register(r, m.peerEvictions)
	return m
}

// register registers c, or returns the collector already registered under
// its name (a second service in one process shares the first's).
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// observe updates the per-partition gauges after a committed round.
func (m *metrics) observe(p int32, l *ledger.Ledger, sinceSnapshot time.Duration, buf []ledger.QueueStat) []ledger.QueueStat {
	ps := strconv.Itoa(int(p))
	buf = l.Queues(buf[:0])
	for _, q := range buf {
		m.queue.WithLabelValues(ps, q.Class).Set(float64(q.Depth))
		m.oldest.WithLabelValues(ps, q.Class).Set(float64(q.OldestWaitMs) / 1000)
	}
	m.snapAge.WithLabelValues(ps).Set(sinceSnapshot.Seconds())
	return buf
}

func (m *metrics) decision(o *ledger.Output) {
	if m.decCtr.vec == nil {
		m.decCtr.vec = m.decisions
	}
	m.decCtr.inc(&o.Decision) // encode.go
	if o.Decision.Reason == schemas.ReasonNodeLost {
		m.nodeLost.Inc()
	}
}
