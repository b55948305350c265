package analytics

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// TypeInvalid is the events.type of a Kafka record that schemas.Decode
// rejected. Its payload column holds the raw record value and decode_error
// the reason; its event_id is derived from the record's position
// ("invalid:<topic>:<partition>:<offset>") so redelivery still collapses.
const TypeInvalid = "invalid"

// eventColumns is the explicit column list of every insert into events, in
// the order Row.values returns them. inserted_at is left to its DEFAULT.
var eventColumns = []string{
	"event_id", "type", "v", "produced_at", "produced_ms", "log_time_ms",
	"topic", "`partition`", "`offset`",
	"request_id", "attempt", "node", "scope", "tenant", "key_id", "route", "class",
	"status", "reason", "gateway_decision", "limit_path", "limit_dimension", "retry_class",
	"retry_after_ms", "needed", "available", "hold_ttl_ms", "max_wait_ms", "deadline_ms",
	"req_path", "prompt_family", "context_band", "fallback", "partial", "config_version", "config_source", "budgets",
	"shadow_buckets", "shadow_limited", "shadow_reason", "shadow_limit_path", "shadow_limit_dimension",
	"shadow_needed", "shadow_available",
	"http_status", "provider", "deployment", "model",
	"est_input_tokens", "est_output_tokens", "est_cached_input_tokens", "est_spend_micros",
	"input_tokens", "output_tokens", "cached_input_tokens", "spend_micros",
	"queue_ms", "first_byte_ms", "total_ms", "attempts", "streaming", "borrowed",
	"payload", "decode_error",
}

// EventColumns are the columns of database.events the sink inserts, in
// its order (the MATERIALIZED ones are computed by the server). `sluice
// bench sink` dumps and re-inserts these as its clickhouse-client reference.
func EventColumns() []string { return slices.Clone(eventColumns) }

// insertEventsSQL returns the batch insert statement for database.events.
func insertEventsSQL(database string) string {
	return "INSERT INTO " + quoteIdent(database) + ".events (" + strings.Join(eventColumns, ", ") + ")"
}

// Row is one events row. Numeric fields not meaningful for an event type are
// zero and string fields empty (no Nullable: it costs on 18.16 and the
// zero value is unambiguous for these columns).
type Row struct {
	EventID    string
	Type       string
	V          uint16
	ProducedAt time.Time // second precision
	ProducedMs uint16    // millisecond part of the producer time
	LogTimeMs  uint64    // Kafka record timestamp (LogAppendTime on Sluice topics)
	Topic      string
	Partition  uint32
	Offset     uint64

	RequestID, Node, Scope, Tenant, KeyID, Route, Class string
	Attempt                                             int32

	Status, Reason, GatewayDecision, LimitPath, LimitDimension, RetryClass string
	RetryAfterMs                                                           int64
	// Needed and Available are the limiting bucket's figures of a Decision;
	// HoldTTLMs its hold; MaxWaitMs and DeadlineMs a ReserveRequested's.
	Needed, Available, HoldTTLMs, MaxWaitMs, DeadlineMs int64
	// ReqPath is the ReserveRequested bucket path, "level:id" joined by "/"
	// (the same form as a Decision's limit_path).
	ReqPath, PromptFamily, ContextBand string
	Fallback, Partial                  uint8
	ConfigVersion, ConfigSource        string
	// Budgets are a ConfigChanged's cross-scope budgets (ledger/budget),
	// one JSON object a line ({"id","level","subject","unit","limit",
	// "window"}; BudgetLines): budget_burn's limits. The ledger document
	// is base64 in the payload and 18.16 cannot decode it.
	Budgets string
	// Shadow* are a granted Decision's shadow verdict (schemas.ShadowVerdict):
	// ShadowBuckets how many shadow buckets it passed (0: no verdict),
	// ShadowLimited whether one could not cover it, and that bucket.
	ShadowBuckets                 int32
	ShadowLimited                 uint8
	ShadowReason, ShadowLimitPath string
	ShadowLimitDimension          string
	ShadowNeeded, ShadowAvailable int64
	HTTPStatus                    int32
	Provider, Deployment, Model   string

	EstInputTokens, EstOutputTokens, EstCachedInputTokens, EstSpendMicros int64
	InputTokens, OutputTokens, CachedInputTokens, SpendMicros             int64
	QueueMs, FirstByteMs, TotalMs                                         int64
	Attempts                                                              int32
	Streaming, Borrowed                                                   uint8

	Payload     string // the record value as received (the encoded event)
	DecodeError string // why the record is invalid; empty for valid events

	// Capacities are a ConfigChanged's buckets, inserted into
	// bucket_capacity with the row (not an events column).
	Capacities []CapacityRow
}

func (r *Row) values() []any {
	return []any{
		r.EventID, r.Type, r.V, r.ProducedAt, r.ProducedMs, r.LogTimeMs,
		r.Topic, r.Partition, r.Offset,
		r.RequestID, r.Attempt, r.Node, r.Scope, r.Tenant, r.KeyID, r.Route, r.Class,
		r.Status, r.Reason, r.GatewayDecision, r.LimitPath, r.LimitDimension, r.RetryClass,
		r.RetryAfterMs, r.Needed, r.Available, r.HoldTTLMs, r.MaxWaitMs, r.DeadlineMs,
		r.ReqPath, r.PromptFamily, r.ContextBand, r.Fallback, r.Partial, r.ConfigVersion, r.ConfigSource, r.Budgets,
		r.ShadowBuckets, r.ShadowLimited, r.ShadowReason, r.ShadowLimitPath, r.ShadowLimitDimension,
		r.ShadowNeeded, r.ShadowAvailable,
		r.HTTPStatus, r.Provider, r.Deployment, r.Model,
		r.EstInputTokens, r.EstOutputTokens, r.EstCachedInputTokens, r.EstSpendMicros,
		r.InputTokens, r.OutputTokens, r.CachedInputTokens, r.SpendMicros,
		r.QueueMs, r.FirstByteMs, r.TotalMs, r.Attempts, r.Streaming, r.Borrowed,
		r.Payload, r.DecodeError,
	}
}

// RecordPos is where a Kafka record sits and when the log stamped it.
type RecordPos struct {
	Topic     string
	Partition int32
	Offset    int64
	LogTime   time.Time
}

// maxDateTimeSec is the largest second a ClickHouse DateTime (UInt32) holds.
const maxDateTimeSec = math.MaxUint32

// splitMs turns unix milliseconds into a DateTime-safe second and a
// millisecond part, clamping to DateTime's range [1970, 2106].
func splitMs(ms int64) (time.Time, uint16) {
	if ms < 0 {
		ms = 0
	}
	if ms/1000 > maxDateTimeSec {
		ms = maxDateTimeSec * 1000
	}
	return time.Unix(ms/1000, 0).UTC(), uint16(ms % 1000)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// RowFromRecord maps one Kafka record value to its events row. It never
// fails: a value schemas.Decode rejects becomes a TypeInvalid row, and
// the second result is false.
func RowFromRecord(value []byte, pos RecordPos) (Row, bool) {
	return rowFromRecord(value, string(value), pos)
}

// rowFromRecord is RowFromRecord with the payload column given: the
// sink passes value itself seen as a string (sharedString), saving a
// copy of the largest column per event, since value is a Kafka record's
// that nothing writes to again.
func rowFromRecord(value []byte, payload string, pos RecordPos) (Row, bool) {
	var e schemas.Event
	logMs := pos.LogTime.UnixMilli()
	if pos.LogTime.IsZero() {
		logMs = 0
	}
	r := Row{
		Topic:   pos.Topic,
		Offset:  uint64(max(pos.Offset, 0)),
		Payload: payload,
	}
	if logMs > 0 {
		r.LogTimeMs = uint64(logMs)
	}
	if pos.Partition > 0 {
		r.Partition = uint32(pos.Partition)
	}
	if err := schemas.Decode(value, &e); err != nil {
		r.Type = TypeInvalid
		r.EventID = "invalid:" + pos.Topic + ":" + strconv.Itoa(int(pos.Partition)) + ":" + strconv.FormatInt(pos.Offset, 10)
		r.DecodeError = err.Error()
		// Partition invalid rows by log time: the producer time, if any, is
		// not to be trusted.
		r.ProducedAt, r.ProducedMs = splitMs(logMs)
		// Keep whatever envelope survived, to help find the producer.
		var env struct {
			V         int    `json:"v"`
			RequestID string `json:"request_id"`
			Node      string `json:"node"`
			Scope     string `json:"scope"`
			Tenant    string `json:"tenant"`
			KeyID     string `json:"key_id"`
			Route     string `json:"route"`
			Class     string `json:"class"`
		}
		if json.Unmarshal(value, &env) == nil {
			r.V = clampU16(env.V)
			r.RequestID, r.Node, r.Scope, r.Tenant = env.RequestID, env.Node, env.Scope, env.Tenant
			r.KeyID, r.Route, r.Class = env.KeyID, env.Route, env.Class
		}
		return r, false
	}
	fillEvent(&r, &e)
	return r, true
}

func clampU16(v int) uint16 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint16:
		return math.MaxUint16
	}
	return uint16(v)
}

// fillEvent sets the envelope and the extracted payload columns.
func fillEvent(r *Row, e *schemas.Event) {
	r.EventID = e.ID
	r.Type = string(e.Type)
	r.V = clampU16(e.V)
	r.ProducedAt, r.ProducedMs = splitMs(e.ProducedAtMs)
	r.RequestID, r.Attempt, r.Node, r.Scope = e.RequestID, e.Attempt, e.Node, e.Scope
	r.Tenant, r.KeyID, r.Route, r.Class = e.Tenant, e.KeyID, e.Route, e.Class

	switch {
	case e.ReserveRequested != nil:
		p := e.ReserveRequested
		r.EstInputTokens, r.EstOutputTokens = p.InputTokens, p.OutputTokens
		r.EstCachedInputTokens, r.EstSpendMicros = p.CachedInputTokens, p.SpendMicros
		r.Streaming = b2u(p.Streaming)
		r.MaxWaitMs, r.DeadlineMs = p.MaxWaitMs, p.DeadlineMs
		r.ReqPath, r.PromptFamily = PathString(p.Path), p.PromptFamily
		r.ContextBand = ContextBand(p.InputTokens)
	case e.Decision != nil:
		p := e.Decision
		r.Status, r.Reason, r.GatewayDecision = string(p.Status), string(p.Reason), string(p.GatewayDecision)
		r.LimitPath, r.LimitDimension, r.RetryClass = p.LimitPath, string(p.LimitDimension), string(p.RetryClass)
		r.RetryAfterMs, r.Borrowed = p.RetryAfterMs, b2u(p.Borrowed)
		r.Needed, r.Available, r.HoldTTLMs = p.Needed, p.Available, p.HoldTTLMs
		if sv := p.Shadow; sv != nil {
			r.ShadowBuckets, r.ShadowLimited, r.ShadowReason = sv.Buckets, b2u(sv.Limited), string(sv.Reason)
			r.ShadowLimitPath, r.ShadowLimitDimension = sv.LimitPath, string(sv.LimitDimension)
			r.ShadowNeeded, r.ShadowAvailable = sv.Needed, sv.Available
		}
	case e.Dispatched != nil:
		p := e.Dispatched
		r.Provider, r.Deployment, r.Model, r.QueueMs = string(p.Provider), p.Deployment, p.Model, p.QueueMs
		r.Fallback = b2u(p.Fallback)
	case e.Reconciled != nil:
		p := e.Reconciled
		r.InputTokens, r.OutputTokens = p.InputTokens, p.OutputTokens
		r.CachedInputTokens, r.SpendMicros = p.CachedInputTokens, p.SpendMicros
		r.EstInputTokens, r.EstOutputTokens = p.EstimatedInputTokens, p.EstimatedOutputTokens
		r.HTTPStatus, r.FirstByteMs, r.TotalMs = p.HTTPStatus, p.FirstByteMs, p.TotalMs
		r.Streaming, r.Partial = b2u(p.Streaming), b2u(p.Partial)
	case e.ProviderRejected != nil:
		p := e.ProviderRejected
		r.HTTPStatus, r.Reason, r.LimitDimension = p.HTTPStatus, string(p.Kind), string(p.Limiter)
		r.RetryAfterMs, r.Deployment = p.RetryAfterMs, p.Deployment
	case e.ProviderObserved != nil:
		r.Deployment = e.ProviderObserved.Deployment
	case e.RetryRequested != nil:
		p := e.RetryRequested
		r.Reason, r.RetryAfterMs = string(p.Reason), p.RetryAfterMs
	case e.Released != nil:
		p := e.Released
		r.Reason, r.InputTokens, r.OutputTokens = string(p.Reason), p.InputTokens, p.OutputTokens
	case e.Outcome != nil:
		p := e.Outcome
		r.Status, r.HTTPStatus, r.Attempts = string(p.Status), p.HTTPStatus, p.Attempts
		r.QueueMs, r.TotalMs, r.Reason = p.QueueMs, p.TotalMs, p.ErrorCode
		r.GatewayDecision = string(p.GatewayDecision)
		r.InputTokens, r.OutputTokens = p.InputTokens, p.OutputTokens
	case e.Tick != nil:
		r.Reason = e.Tick.Reason
	case e.ConfigChanged != nil:
		r.ConfigVersion, r.ConfigSource = e.ConfigChanged.ConfigVersion, e.ConfigChanged.Source
		r.Budgets = BudgetLines(e.ConfigChanged.Ledger)
	}
	if e.ConfigChanged != nil {
		r.Capacities = CapacityRows(r, e)
	}
	// A ConfigChanged's buckets go to bucket_capacity (CapacityRows); a
	// Snapshot has nothing worth a column; the payload has it all.
}

// PathString renders a bucket path as the ledger renders a limit_path:
// "level:id" elements joined by "/".
func PathString(path []schemas.PathLevel) string {
	var sb strings.Builder
	for i, l := range path {
		if i > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(l.Level)
		sb.WriteByte(':')
		sb.WriteString(l.ID)
	}
	return sb.String()
}

// ContextBands are the context-length bands of estimated input tokens, by
// upper bound (exclusive); the last band is open.
var ContextBands = []struct {
	Name     string
	BelowMax int64
}{
	{"lt_1k", 1 << 10}, {"1k_4k", 4 << 10}, {"4k_16k", 16 << 10}, {"16k_64k", 64 << 10}, {"64k_plus", math.MaxInt64},
}

// ContextBand names the context-length band of an input-token estimate.
func ContextBand(inputTokens int64) string {
	for _, b := range ContextBands {
		if inputTokens < b.BelowMax {
			return b.Name
		}
	}
	return ContextBands[len(ContextBands)-1].Name
}

// BudgetLines renders the cross-scope budgets of a ledger document (its
// "budget" section, ledger/budget.Config) as one compact JSON object a
// line, the form of events.budgets: flat objects that visitParamExtract
// reads on every engine. A document without budgets (or that does not
// parse: the ledger refuses it too) gives "".
func BudgetLines(ledgerDoc []byte) string {
	var doc struct {
		Budget *struct {
			Budgets []budgetLine `json:"budgets"`
		} `json:"budget"`
	}
	if len(ledgerDoc) == 0 || json.Unmarshal(ledgerDoc, &doc) != nil || doc.Budget == nil {
		return ""
	}
	var sb strings.Builder
	for i, b := range doc.Budget.Budgets {
		line, err := json.Marshal(b)
		if err != nil {
			continue
		}
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.Write(line)
	}
	return sb.String()
}

// budgetLine is the part of a ledger/budget.Budget that budget_burn reads
// (the package's own type is not imported: analytics reads the log, it
// does not depend on the ledger's internals).
type budgetLine struct {
	ID      string `json:"id"`
	Level   string `json:"level"`
	Subject string `json:"subject"`
	Unit    string `json:"unit"`
	Limit   int64  `json:"limit"`
	Window  string `json:"window"`
}
