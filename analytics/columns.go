package analytics

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// eventCols holds a batch of events rows column by column, in the order of
// eventColumns. Appending whole columns (driver.BatchColumn.Append of a
// slice) skips the driver's per-value reflection and boxing, which cost the
// sink more CPU than decoding the events did. Generated from Row.values;
// TestEventColsMatchValues keeps the two in step.
type eventCols struct {
	eventID              []string
	typ                  []string
	v                    []uint16
	producedAt           []time.Time
	producedMs           []uint16
	logTimeMs            []uint64
	topic                []string
	partition            []uint32
	offset               []uint64
	requestID            []string
	attempt              []int32
	node                 []string
	scope                []string
	tenant               []string
	keyID                []string
	route                []string
	class                []string
	status               []string
	reason               []string
	gatewayDecision      []string
	limitPath            []string
	limitDimension       []string
	retryClass           []string
	retryAfterMs         []int64
	needed               []int64
	available            []int64
	holdTTLMs            []int64
	maxWaitMs            []int64
	deadlineMs           []int64
	reqPath              []string
	promptFamily         []string
	contextBand          []string
	fallback             []uint8
	partial              []uint8
	configVersion        []string
	configSource         []string
	budgets              []string
	shadowBuckets        []int32
	shadowLimited        []uint8
	shadowReason         []string
	shadowLimitPath      []string
	shadowLimitDim       []string
	shadowNeeded         []int64
	shadowAvailable      []int64
	httpStatus           []int32
	provider             []string
	deployment           []string
	model                []string
	estInputTokens       []int64
	estOutputTokens      []int64
	estCachedInputTokens []int64
	estSpendMicros       []int64
	inputTokens          []int64
	outputTokens         []int64
	cachedInputTokens    []int64
	spendMicros          []int64
	queueMs              []int64
	firstByteMs          []int64
	totalMs              []int64
	attempts             []int32
	streaming            []uint8
	borrowed             []uint8
	payload              []string
	decodeError          []string
}

// reset empties the columns for a batch of n rows, keeping their memory
// and growing each to n at once: grown row by row, they regrew by 1.25×
// steps on the first batches of each inserter (0.39 s of growslice per
// million events in eventCols.add).
func (c *eventCols) reset(n int) {
	c.eventID = slices.Grow(c.eventID[:0], n)
	c.typ = slices.Grow(c.typ[:0], n)
	c.v = slices.Grow(c.v[:0], n)
	c.producedAt = slices.Grow(c.producedAt[:0], n)
	c.producedMs = slices.Grow(c.producedMs[:0], n)
	c.logTimeMs = slices.Grow(c.logTimeMs[:0], n)
	c.topic = slices.Grow(c.topic[:0], n)
	c.partition = slices.Grow(c.partition[:0], n)
	c.offset = slices.Grow(c.offset[:0], n)
	c.requestID = slices.Grow(c.requestID[:0], n)
	c.attempt = slices.Grow(c.attempt[:0], n)
	c.node = slices.Grow(c.node[:0], n)
	c.scope = slices.Grow(c.scope[:0], n)
	c.tenant = slices.Grow(c.tenant[:0], n)
	c.keyID = slices.Grow(c.keyID[:0], n)
	c.route = slices.Grow(c.route[:0], n)
	c.class = slices.Grow(c.class[:0], n)
	c.status = slices.Grow(c.status[:0], n)
	c.reason = slices.Grow(c.reason[:0], n)
	c.gatewayDecision = slices.Grow(c.gatewayDecision[:0], n)
	c.limitPath = slices.Grow(c.limitPath[:0], n)
	c.limitDimension = slices.Grow(c.limitDimension[:0], n)
	c.retryClass = slices.Grow(c.retryClass[:0], n)
	c.retryAfterMs = slices.Grow(c.retryAfterMs[:0], n)
	c.needed = slices.Grow(c.needed[:0], n)
	c.available = slices.Grow(c.available[:0], n)
	c.holdTTLMs = slices.Grow(c.holdTTLMs[:0], n)
	c.maxWaitMs = slices.Grow(c.maxWaitMs[:0], n)
	c.deadlineMs = slices.Grow(c.deadlineMs[:0], n)
	c.reqPath = slices.Grow(c.reqPath[:0], n)
	c.promptFamily = slices.Grow(c.promptFamily[:0], n)
	c.contextBand = slices.Grow(c.contextBand[:0], n)
	c.fallback = slices.Grow(c.fallback[:0], n)
	c.partial = slices.Grow(c.partial[:0], n)
	c.configVersion = slices.Grow(c.configVersion[:0], n)
	c.configSource = slices.Grow(c.configSource[:0], n)
	c.budgets = slices.Grow(c.budgets[:0], n)
	c.shadowBuckets = slices.Grow(c.shadowBuckets[:0], n)
	c.shadowLimited = slices.Grow(c.shadowLimited[:0], n)
	c.shadowReason = slices.Grow(c.shadowReason[:0], n)
	c.shadowLimitPath = slices.Grow(c.shadowLimitPath[:0], n)
	c.shadowLimitDim = slices.Grow(c.shadowLimitDim[:0], n)
	c.shadowNeeded = slices.Grow(c.shadowNeeded[:0], n)
	c.shadowAvailable = slices.Grow(c.shadowAvailable[:0], n)
	c.httpStatus = slices.Grow(c.httpStatus[:0], n)
	c.provider = slices.Grow(c.provider[:0], n)
	c.deployment = slices.Grow(c.deployment[:0], n)
	c.model = slices.Grow(c.model[:0], n)
	c.estInputTokens = slices.Grow(c.estInputTokens[:0], n)
	c.estOutputTokens = slices.Grow(c.estOutputTokens[:0], n)
	c.estCachedInputTokens = slices.Grow(c.estCachedInputTokens[:0], n)
	c.estSpendMicros = slices.Grow(c.estSpendMicros[:0], n)
	c.inputTokens = slices.Grow(c.inputTokens[:0], n)
	c.outputTokens = slices.Grow(c.outputTokens[:0], n)
	c.cachedInputTokens = slices.Grow(c.cachedInputTokens[:0], n)
	c.spendMicros = slices.Grow(c.spendMicros[:0], n)
	c.queueMs = slices.Grow(c.queueMs[:0], n)
	c.firstByteMs = slices.Grow(c.firstByteMs[:0], n)
	c.totalMs = slices.Grow(c.totalMs[:0], n)
	c.attempts = slices.Grow(c.attempts[:0], n)
	c.streaming = slices.Grow(c.streaming[:0], n)
	c.borrowed = slices.Grow(c.borrowed[:0], n)
	c.payload = slices.Grow(c.payload[:0], n)
	c.decodeError = slices.Grow(c.decodeError[:0], n)
}

// add appends one row.
func (c *eventCols) add(r *Row) {
	c.eventID = append(c.eventID, r.EventID)
	c.typ = append(c.typ, r.Type)
	c.v = append(c.v, r.V)
	c.producedAt = append(c.producedAt, r.ProducedAt)
	c.producedMs = append(c.producedMs, r.ProducedMs)
	c.logTimeMs = append(c.logTimeMs, r.LogTimeMs)
	c.topic = append(c.topic, r.Topic)
	c.partition = append(c.partition, r.Partition)
	c.offset = append(c.offset, r.Offset)
	c.requestID = append(c.requestID, r.RequestID)
	c.attempt = append(c.attempt, r.Attempt)
	c.node = append(c.node, r.Node)
	c.scope = append(c.scope, r.Scope)
	c.tenant = append(c.tenant, r.Tenant)
	c.keyID = append(c.keyID, r.KeyID)
	c.route = append(c.route, r.Route)
	c.class = append(c.class, r.Class)
	c.status = append(c.status, r.Status)
	c.reason = append(c.reason, r.Reason)
	c.gatewayDecision = append(c.gatewayDecision, r.GatewayDecision)
	c.limitPath = append(c.limitPath, r.LimitPath)
	c.limitDimension = append(c.limitDimension, r.LimitDimension)
	c.retryClass = append(c.retryClass, r.RetryClass)
	c.retryAfterMs = append(c.retryAfterMs, r.RetryAfterMs)
	c.needed = append(c.needed, r.Needed)
	c.available = append(c.available, r.Available)
	c.holdTTLMs = append(c.holdTTLMs, r.HoldTTLMs)
	c.maxWaitMs = append(c.maxWaitMs, r.MaxWaitMs)
	c.deadlineMs = append(c.deadlineMs, r.DeadlineMs)
	c.reqPath = append(c.reqPath, r.ReqPath)
	c.promptFamily = append(c.promptFamily, r.PromptFamily)
	c.contextBand = append(c.contextBand, r.ContextBand)
	c.fallback = append(c.fallback, r.Fallback)
	c.partial = append(c.partial, r.Partial)
	c.configVersion = append(c.configVersion, r.ConfigVersion)
	c.configSource = append(c.configSource, r.ConfigSource)
	c.budgets = append(c.budgets, r.Budgets)
	c.shadowBuckets = append(c.shadowBuckets, r.ShadowBuckets)
	c.shadowLimited = append(c.shadowLimited, r.ShadowLimited)
	c.shadowReason = append(c.shadowReason, r.ShadowReason)
	c.shadowLimitPath = append(c.shadowLimitPath, r.ShadowLimitPath)
	c.shadowLimitDim = append(c.shadowLimitDim, r.ShadowLimitDimension)
	c.shadowNeeded = append(c.shadowNeeded, r.ShadowNeeded)
	c.shadowAvailable = append(c.shadowAvailable, r.ShadowAvailable)
	c.httpStatus = append(c.httpStatus, r.HTTPStatus)
	c.provider = append(c.provider, r.Provider)
	c.deployment = append(c.deployment, r.Deployment)
	c.model = append(c.model, r.Model)
	c.estInputTokens = append(c.estInputTokens, r.EstInputTokens)
	c.estOutputTokens = append(c.estOutputTokens, r.EstOutputTokens)
	c.estCachedInputTokens = append(c.estCachedInputTokens, r.EstCachedInputTokens)
	c.estSpendMicros = append(c.estSpendMicros, r.EstSpendMicros)
	c.inputTokens = append(c.inputTokens, r.InputTokens)
	c.outputTokens = append(c.outputTokens, r.OutputTokens)
	c.cachedInputTokens = append(c.cachedInputTokens, r.CachedInputTokens)
	c.spendMicros = append(c.spendMicros, r.SpendMicros)
	c.queueMs = append(c.queueMs, r.QueueMs)
	c.firstByteMs = append(c.firstByteMs, r.FirstByteMs)
	c.totalMs = append(c.totalMs, r.TotalMs)
	c.attempts = append(c.attempts, r.Attempts)
	c.streaming = append(c.streaming, r.Streaming)
	c.borrowed = append(c.borrowed, r.Borrowed)
	c.payload = append(c.payload, r.Payload)
	c.decodeError = append(c.decodeError, r.DecodeError)
}

// slices returns the columns in eventColumns order.
func (c *eventCols) slices() []any {
	return []any{
		c.eventID, c.typ, c.v, c.producedAt, c.producedMs, c.logTimeMs, c.topic, c.partition, c.offset,
		c.requestID, c.attempt, c.node, c.scope, c.tenant, c.keyID, c.route, c.class, c.status, c.reason,
		c.gatewayDecision, c.limitPath, c.limitDimension, c.retryClass, c.retryAfterMs, c.needed, c.available,
		c.holdTTLMs, c.maxWaitMs, c.deadlineMs, c.reqPath, c.promptFamily, c.contextBand, c.fallback, c.partial,
		c.configVersion, c.configSource, c.budgets, c.shadowBuckets, c.shadowLimited, c.shadowReason, c.shadowLimitPath,
		c.shadowLimitDim, c.shadowNeeded, c.shadowAvailable, c.httpStatus, c.provider, c.deployment, c.model, c.estInputTokens,
		c.estOutputTokens, c.estCachedInputTokens, c.estSpendMicros, c.inputTokens, c.outputTokens,
		c.cachedInputTokens, c.spendMicros, c.queueMs, c.firstByteMs, c.totalMs, c.attempts, c.streaming,
		c.borrowed, c.payload, c.decodeError,
	}
}

// appendTo appends every column to batch b, each driver column reserved
// to the batch's size first (reserveColumn), in the memory of mem (the
// driver columns of a batch sent before, keepColumns; nil: fresh memory).
// mem's memory belongs to b from here on.
func (c *eventCols) appendTo(b driver.Batch, mem []reflect.Value) error {
	cols := b.Columns()
	for i, s := range c.slices() {
		if i < len(cols) {
			rows, bytes := colSize(s)
			var spare reflect.Value
			if i < len(mem) {
				spare = mem[i]
			}
			reserveColumnIn(cols[i], rows, bytes, spare)
		}
		if err := b.Column(i).Append(s); err != nil {
			return fmt.Errorf("column %s: %w", eventColumns[i], err)
		}
	}
	return nil
}

// colSize is the rows of column slice s and, for a string column, the
// bytes of its strings.
func colSize(s any) (rows, bytes int) {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Slice {
		return 0, 0
	}
	if ss, ok := s.([]string); ok {
		for _, str := range ss {
			bytes += len(str)
		}
	}
	return v.Len(), bytes
}

// reserveColumn grows the driver's column col (a column of a batch
// PrepareBatch opened) to take rows more rows and, for a String column,
// bytes more bytes of string data, and says whether it could. It exists
// because clickhouse-go 2.51 gives each batch a fresh, empty block and no
// way to reserve its columns: filling them appended value by value, and
// the regrowth of the string columns (ch-go's proto.ColStr: one Buf of
// all the bytes, one Pos per row; Go grows a large slice by 1.25×) was
// 0.9 of the sink's 1.7 client CPU-s per million events (issue 22 item
// 6). The driver keeps the ch-go column in an unexported field "col", so
// it is reached through reflect and unsafe; the shapes handled are the
// ones the events table uses (a slice: the numeric columns; Buf and Pos:
// String; Data: DateTime). A driver whose columns look otherwise is left
// alone (false) and filled as before, only slower:
// TestReserveEventColumns fails on such an upgrade. Reserving changes
// capacity, never contents, so the rows sent are the same either way.
func reserveColumn(col column.Interface, rows, bytes int) bool {
	return reserveColumnIn(col, rows, bytes, reflect.Value{})
}

// reserveColumnIn is reserveColumn in the memory of spare when it can:
// spare is the ch-go column of a batch sent before (keepColumns), whose
// slices the empty column takes over (emptied) before growing them, so
// that batch after batch reuses the same memory instead of allocating
// ~136 MB per 100,000 rows and having GC collect it. A spare of another
// type, or an invalid one, is ignored.
func reserveColumnIn(col column.Interface, rows, bytes int, spare reflect.Value) bool {
	f := chColumn(col)
	if !f.IsValid() {
		return false
	}
	if spare.IsValid() && spare.Type() != f.Type() {
		spare = reflect.Value{}
	}
	switch f.Kind() {
	case reflect.Slice:
		growIn(f, spare, rows)
		return true
	case reflect.Struct:
		buf, pos := f.FieldByName("Buf"), f.FieldByName("Pos")
		if buf.IsValid() && pos.IsValid() && buf.Type() == reflect.TypeFor[[]byte]() && pos.Kind() == reflect.Slice {
			growIn(buf, fieldOf(spare, "Buf"), bytes)
			growIn(pos, fieldOf(spare, "Pos"), rows)
			return true
		}
		if data := f.FieldByName("Data"); data.IsValid() && data.Kind() == reflect.Slice {
			growIn(data, fieldOf(spare, "Data"), rows)
			return true
		}
	}
	return false
}

// chColumn returns the ch-go column behind driver column col (its
// unexported field "col"), settable, or an invalid value when col does
// not look like that.
func chColumn(col column.Interface) reflect.Value {
	v := reflect.ValueOf(col)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}
	}
	f := v.Elem().FieldByName("col")
	if !f.IsValid() {
		return reflect.Value{}
	}
	// An unexported field cannot be set through reflect; the same memory
	// seen through NewAt can.
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

func fieldOf(v reflect.Value, name string) reflect.Value {
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.FieldByName(name)
}

// growIn makes empty slice s take n more elements, in spare's memory when
// spare is a slice of its type (emptied first; grown if too small).
func growIn(s, spare reflect.Value, n int) {
	if spare.IsValid() && spare.Kind() == reflect.Slice && spare.Type() == s.Type() && s.Len() == 0 {
		s.Set(spare.Slice(0, 0))
	}
	s.Grow(n)
}

// keepColumns returns the ch-go columns of batch b, for the next batch's
// appendTo to reuse their memory. Call it only once b is done with them
// (after Send or Abort returned): the next batch overwrites them.
func keepColumns(b driver.Batch) []reflect.Value {
	cols := b.Columns()
	mem := make([]reflect.Value, len(cols))
	for i, col := range cols {
		if f := chColumn(col); f.IsValid() {
			mem[i] = reflect.ValueOf(f.Interface()) // a copy: the slices, not the old column
		}
	}
	return mem
}

// colMem is an inserter's driver-column memory between batches: the
// memory of batches sent, for the next ones to fill. A batch takes one
// set before its fill and gives its own back after its send, so no two
// batches ever share memory; prepare and a send can run at once, hence
// the lock.
type colMem struct {
	mu   sync.Mutex
	sets [][]reflect.Value
}

// take returns a set of column memory, or nil when none is free.
func (m *colMem) take() []reflect.Value {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sets) == 0 {
		return nil
	}
	set := m.sets[len(m.sets)-1]
	m.sets = m.sets[:len(m.sets)-1]
	return set
}

// give keeps batch b's column memory (b sent or aborted). At most two
// sets are kept: one batch sending and one being filled at a time.
func (m *colMem) give(b driver.Batch) {
	set := keepColumns(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sets) < 2 {
		m.sets = append(m.sets, set)
	}
}
