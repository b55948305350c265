package sim

import (
	"math"
	"time"
)

// Dimension names, used in stats, metrics, error messages and the reason a
// request was limited.
const (
	DimRequests     = "requests"
	DimTokens       = "tokens" // total = input + output
	DimInputTokens  = "input_tokens"
	DimOutputTokens = "output_tokens"
	DimDaily        = "requests_per_day"
	DimAcceleration = "acceleration"
	DimStorm        = "storm"
	// DimCapacityStorm: refused by a capacity storm (Storm.Kind "capacity").
	DimCapacityStorm = "capacity_storm"
	DimTooLarge      = "request_too_large"
)

// bucket is a continuous token bucket. level may go negative (debt) when the
// actual usage charged after a response exceeds what was available.
type bucket struct {
	capacity float64
	rate     float64 // units per second
	level    float64
	last     time.Time
}

func newBucket(capacity, rate float64, now time.Time) *bucket {
	return &bucket{capacity: capacity, rate: rate, level: capacity, last: now}
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last); dt > 0 {
		b.level = math.Min(b.capacity, b.level+b.rate*dt.Seconds())
		b.last = now
	}
}

// wait is how long until n units can be taken (0 = now). A request larger
// than the capacity is admitted only when the bucket is full.
func (b *bucket) wait(n float64, now time.Time) time.Duration {
	b.refill(now)
	need := math.Min(n, b.capacity)
	if b.level >= need-1e-9 {
		return 0
	}
	return secondsCeil((need - b.level) / b.rate)
}

// untilFull is how long until the bucket is fully replenished.
func (b *bucket) untilFull(now time.Time) time.Duration {
	b.refill(now)
	if b.level >= b.capacity {
		return 0
	}
	return secondsCeil((b.capacity - b.level) / b.rate)
}

func secondsCeil(s float64) time.Duration {
	d := time.Duration(math.Ceil(s * float64(time.Second)))
	// Round up to whole milliseconds so the advertised waits are exact.
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// fixedWindow counts units in fixed windows aligned to epoch.
type fixedWindow struct {
	epoch    time.Time
	length   time.Duration
	capacity float64
	index    int64
	used     float64
}

func (f *fixedWindow) roll(now time.Time) {
	idx := int64(now.Sub(f.epoch) / f.length)
	if now.Before(f.epoch) {
		idx = 0
	}
	if idx != f.index {
		f.index = idx
		f.used = 0
	}
}

func (f *fixedWindow) next(now time.Time) time.Duration {
	return f.epoch.Add(time.Duration(f.index+1) * f.length).Sub(now)
}

// wait: a request larger than the window capacity is admitted only into an
// untouched window.
func (f *fixedWindow) wait(n float64, now time.Time) time.Duration {
	f.roll(now)
	if f.used+n <= f.capacity+1e-9 || f.used == 0 {
		return 0
	}
	return f.next(now)
}

// dimLimiter enforces one per-minute limit: a continuous bucket of capacity
// limit refilled at limit/60 per second (this is what the rate-limit headers
// advertise), plus an optional sub-minute limiter.
type dimLimiter struct {
	name   string
	limit  int64
	minute *bucket
	subB   *bucket
	subF   *fixedWindow
}

func newDimLimiter(name string, limit int64, l Limits, epoch, now time.Time) *dimLimiter {
	if limit <= 0 {
		return nil
	}
	perSec := float64(limit) / 60
	d := &dimLimiter{name: name, limit: limit, minute: newBucket(float64(limit), perSec, now)}
	w := l.Window.D()
	if w > 0 && w < time.Minute {
		if l.WindowMode == WindowFixed {
			c := math.Floor(perSec * w.Seconds())
			if c < 1 {
				c = 1
			}
			d.subF = &fixedWindow{epoch: epoch, length: w, capacity: c, index: -1}
		} else {
			d.subB = newBucket(perSec*w.Seconds(), perSec, now)
		}
	} else if w == time.Minute && l.WindowMode == WindowFixed {
		d.subF = &fixedWindow{epoch: epoch, length: w, capacity: float64(limit), index: -1}
	}
	return d
}

func (d *dimLimiter) wait(n float64, now time.Time) time.Duration {
	if d == nil || n <= 0 {
		return 0
	}
	w := d.minute.wait(n, now)
	if d.subB != nil {
		w = max(w, d.subB.wait(n, now))
	}
	if d.subF != nil {
		w = max(w, d.subF.wait(n, now))
	}
	return w
}

// charge debits n (negative n refunds) from every level of the limiter.
func (d *dimLimiter) charge(n float64, now time.Time) {
	if d == nil || n == 0 {
		return
	}
	d.minute.refill(now)
	d.minute.level = math.Min(d.minute.capacity, d.minute.level-n)
	if d.subB != nil {
		d.subB.refill(now)
		d.subB.level = math.Min(d.subB.capacity, d.subB.level-n)
	}
	if d.subF != nil {
		d.subF.roll(now)
		d.subF.used = math.Max(0, d.subF.used+n)
	}
}

// remaining is the advertised remaining count (per-minute view, floored, >= 0).
func (d *dimLimiter) remaining(now time.Time) int64 {
	d.minute.refill(now)
	return int64(math.Max(0, math.Floor(d.minute.level+1e-9)))
}

// reset is the advertised time until the per-minute bucket is full again.
func (d *dimLimiter) reset(now time.Time) time.Duration { return d.minute.untilFull(now) }

// daily is a requests-per-day counter that resets at a UTC time of day.
type daily struct {
	limit  int64
	offset time.Duration
	day    time.Time // start of the current period
	used   int64
}

func (d *daily) roll(now time.Time) {
	start := now.Add(-d.offset).Truncate(24 * time.Hour).Add(d.offset)
	if !start.Equal(d.day) {
		d.day = start
		d.used = 0
	}
}

func (d *daily) nextReset(now time.Time) time.Time {
	d.roll(now)
	return d.day.Add(24 * time.Hour)
}

// accel is the acceleration limiter.
type accel struct {
	cfg   Acceleration
	epoch time.Time
	index int64
	cur   int64
	prev  int64
}

func (a *accel) window() time.Duration {
	if a.cfg.Window <= 0 {
		return time.Minute
	}
	return a.cfg.Window.D()
}

func (a *accel) roll(now time.Time) {
	idx := int64(now.Sub(a.epoch) / a.window())
	switch {
	case idx == a.index:
	case idx == a.index+1:
		a.prev, a.cur, a.index = a.cur, 0, idx
	default:
		a.prev, a.cur, a.index = 0, 0, idx
	}
}

func (a *accel) allowed() int64 {
	return max(a.cfg.Floor, int64(math.Floor(a.cfg.Factor*float64(a.prev))))
}

func (a *accel) wait(now time.Time) time.Duration {
	a.roll(now)
	if a.cur < a.allowed() {
		return 0
	}
	return a.epoch.Add(time.Duration(a.index+1) * a.window()).Sub(now)
}

// scope holds the limiter state of one provider scope (provider + model or
// deployment).
type scope struct {
	provider, model   string
	limits            Limits
	req, tok, in, out *dimLimiter
	day               *daily
	acc               *accel
}

func newScope(provider, model string, l Limits, epoch, now time.Time) *scope {
	s := &scope{
		provider: provider, model: model, limits: l,
		req: newDimLimiter(DimRequests, l.RPM, l, epoch, now),
		tok: newDimLimiter(DimTokens, l.TPM, l, epoch, now),
		in:  newDimLimiter(DimInputTokens, l.ITPM, l, epoch, now),
		out: newDimLimiter(DimOutputTokens, l.OTPM, l, epoch, now),
	}
	if l.RPD > 0 {
		off, _ := parseDailyReset(l.DailyReset)
		s.day = &daily{limit: l.RPD, offset: off}
		s.day.roll(now)
	}
	if l.Acceleration != nil {
		s.acc = &accel{cfg: *l.Acceleration, epoch: epoch, index: -1}
		s.acc.roll(now)
	}
	return s
}

// demand is what a request costs at admission.
type demand struct {
	input  int64 // input tokens counted against limits (cache reads excluded if so configured)
	output int64 // output tokens reserved at admission
}

// denial says which limit rejected a request and for how long.
type denial struct {
	dim    string
	wait   time.Duration
	limit  int64
	used   int64
	demand int64
}

// admit checks every limit of the scope atomically and charges them all or
// none. It returns nil when admitted.
func (s *scope) admit(d demand, now time.Time) *denial {
	var worst *denial
	consider := func(dim string, w time.Duration, limit, used, need int64) {
		if w <= 0 {
			return
		}
		if worst == nil || w > worst.wait {
			worst = &denial{dim: dim, wait: w, limit: limit, used: used, demand: need}
		}
	}
	// A request larger than a whole minute's limit can never be served.
	for _, c := range []struct {
		l    *dimLimiter
		need int64
	}{{s.tok, d.input + d.output}, {s.in, d.input}, {s.out, d.output}} {
		if c.l != nil && c.need > c.l.limit {
			return &denial{dim: DimTooLarge, wait: time.Minute, limit: c.l.limit, demand: c.need}
		}
	}
	if s.day != nil {
		s.day.roll(now)
		if s.day.used >= s.day.limit {
			consider(DimDaily, s.day.nextReset(now).Sub(now), s.day.limit, s.day.used, 1)
		}
	}
	if s.acc != nil {
		consider(DimAcceleration, s.acc.wait(now), s.acc.allowed(), s.acc.cur, 1)
	}
	check := func(l *dimLimiter, need int64) {
		if l != nil {
			consider(l.name, l.wait(float64(need), now), l.limit, l.limit-l.remaining(now), need)
		}
	}
	check(s.req, 1)
	check(s.tok, d.input+d.output)
	check(s.in, d.input)
	check(s.out, d.output)
	if worst != nil {
		return worst
	}
	s.req.charge(1, now)
	s.tok.charge(float64(d.input+d.output), now)
	s.in.charge(float64(d.input), now)
	s.out.charge(float64(d.output), now)
	if s.day != nil {
		s.day.used++
	}
	if s.acc != nil {
		s.acc.cur++
	}
	return nil
}

// settle adjusts the output charge after the response: delta > 0 charges
// more (possibly into debt), delta < 0 refunds.
func (s *scope) settle(delta int64, now time.Time) {
	if delta == 0 {
		return
	}
	s.tok.charge(float64(delta), now)
	s.out.charge(float64(delta), now)
}
