package ledger

import "math/bits"

// Saturating arithmetic keeps every level inside ±maxScaled whatever the
// events say, so no input can overflow a bucket.

func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	neg := (a < 0) != (b < 0)
	if a < 0 {
		a = -a
	}
	if b < 0 {
		b = -b
	}
	// a×b > maxScaled ⟺ a > maxScaled/b for positive a, b; the 128-bit
	// product says so without a division (this runs for every bucket of
	// every reconcile).
	if hi, lo := bits.Mul64(uint64(a), uint64(b)); hi != 0 || lo > uint64(maxScaled) {
		if neg {
			return -maxScaled
		}
		return maxScaled
	}
	if neg {
		return -a * b
	}
	return a * b
}

func clampSat(v int64) int64 {
	if v > maxScaled {
		return maxScaled
	}
	if v < -maxScaled {
		return -maxScaled
	}
	return v
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// fill adds rate×dt to level without passing burst (levels above burst, as
// after a config change lowering the burst, are clamped).
func fill(level, dt, rate, burst int64) int64 {
	if level >= burst {
		return burst
	}
	if dt <= 0 || rate <= 0 {
		return level
	}
	// dt ≥ ⌈gap/rate⌉ ⟺ dt×rate ≥ gap; the 128-bit product avoids both
	// the division and an overflow of dt×rate after a long idle time.
	gap := burst - level
	hi, lo := bits.Mul64(uint64(dt), uint64(rate))
	if hi != 0 || lo >= uint64(gap) {
		return burst
	}
	return level + int64(lo)
}

// rampRate returns the current rate of a ramp bucket and its scaled burst.
func rampBurst(rate, window int64) int64 { return rate * window }

// refill brings bucket b up to log time now. The common cases that change
// nothing (a token bucket already refilled at this time, a concurrency
// bucket) return before the call to refillKind, so that this inlines.
func (l *Ledger) refill(b *bucket, sp *spec, now int64) {
	if (sp.kind == kToken && now <= b.LastMs) || sp.kind == kConcurrency {
		return
	}
	l.refillKind(b, sp, now)
}

// refillToken is refill of a token bucket (small enough to inline into the
// hot loops).
func refillToken(b *bucket, sp *spec, now int64) {
	if now > b.LastMs {
		dt := now - b.LastMs
		b.Level = fill(b.Level, dt, sp.capacity, sp.burst)
		if sp.guaranteed > 0 {
			b.Base = fill(b.Base, dt, sp.guaranteed, sp.gBurst)
		}
		b.LastMs = now
	}
}

func (l *Ledger) refillKind(b *bucket, sp *spec, now int64) {
	switch sp.kind {
	case kToken:
		refillToken(b, sp, now)
	case kRamp:
		rs := &l.st.Ramps[b.Ext]
		if now > b.LastMs {
			dt := now - b.LastMs
			b.LastMs = now
			step := sp.ramp.StepPerPeriod
			if l.rampPaused(sp, rs) || step == 0 || rs.Rate >= sp.capacity {
				b.Level = fill(b.Level, dt, rs.Rate, rampBurst(rs.Rate, sp.window))
			} else if steps := (sp.capacity - rs.Rate + step - 1) / step; dt >= steps*sp.period {
				// Long idle: fully grown and full.
				rs.Rate, rs.GrowMs = sp.capacity, 0
				b.Level = rampBurst(rs.Rate, sp.window)
			} else {
				// Piecewise: the rate grows by a step at each period of
				// un-paused time, never retroactively.
				if rs.GrowMs < 0 || rs.GrowMs >= sp.period {
					rs.GrowMs = 0
				}
				for dt > 0 {
					seg := min(dt, sp.period-rs.GrowMs)
					b.Level = fill(b.Level, seg, rs.Rate, rampBurst(rs.Rate, sp.window))
					rs.GrowMs += seg
					dt -= seg
					if rs.GrowMs >= sp.period {
						rs.GrowMs = 0
						rs.Rate = min(sp.capacity, rs.Rate+step)
					}
				}
			}
		}
		rampRoll(rs, now, sp.period)
	case kFixed:
		w := floorDiv(now-sp.offset, sp.period)
		if w > b.LastMs {
			b.Level = sp.capacity + min(b.Level, 0)
			b.LastMs = w
		}
	case kRolling:
		l.rollAdvance(&l.st.Rolls[b.Ext], sp, now)
	}
}

func (l *Ledger) rollAdvance(rs *rollState, sp *spec, now int64) {
	cur := now / sp.slotMs
	if cur <= rs.Cur {
		return
	}
	n := int64(len(rs.Ring))
	steps := cur - rs.Cur
	if steps >= n {
		for i := range rs.Ring {
			rs.Ring[i] = 0
		}
		rs.Sum = 0
	} else {
		for s := rs.Cur + 1; s <= cur; s++ {
			i := s % n
			rs.Sum -= rs.Ring[i]
			rs.Ring[i] = 0
		}
	}
	rs.Cur = cur
}

// rampRoll rotates a ramp's stats period.
func rampRoll(rs *rampState, now, period int64) {
	p := now / period
	if p == rs.Period {
		return
	}
	if p == rs.Period+1 {
		rs.Grants[1], rs.Rejects[1], rs.Lat[1] = rs.Grants[0], rs.Rejects[0], rs.Lat[0]
	} else {
		rs.Grants[1], rs.Rejects[1], rs.Lat[1] = 0, 0, [16]int64{}
	}
	rs.Grants[0], rs.Rejects[0], rs.Lat[0] = 0, 0, [16]int64{}
	rs.Period = p
}

// rampPaused reports whether a ramp's growth is paused by stress: provider
// rejections, the scope's queue depth or reported p95 latency.
func (l *Ledger) rampPaused(sp *spec, rs *rampState) bool {
	rc := &sp.ramp
	if rc.PauseRejectPermille > 0 {
		g := rs.Grants[0] + rs.Grants[1]
		j := rs.Rejects[0] + rs.Rejects[1]
		if g > 0 && j*1000 > rc.PauseRejectPermille*g {
			return true
		}
	}
	if rc.PauseQueueDepth > 0 {
		if int64(len(l.st.Scopes[rs.Scope].Queue)) >= rc.PauseQueueDepth {
			return true
		}
	}
	if rc.PauseP95Ms > 0 {
		var total int64
		var h [16]int64
		for i := range h {
			h[i] = rs.Lat[0][i] + rs.Lat[1][i]
			total += h[i]
		}
		if total > 0 {
			var acc int64
			for i := range h {
				acc += h[i]
				if acc*100 >= total*95 {
					// Bin i holds latencies in [2^(i-1), 2^i); its upper
					// bound is the conservative p95.
					if int64(1)<<i > rc.PauseP95Ms {
						return true
					}
					break
				}
			}
		}
	}
	return false
}

func latBin(ms int64) int {
	i := 0
	for ms > 0 && i < 15 {
		ms >>= 1
		i++
	}
	return i
}

// available returns how many units bucket b can give now (may be negative).
func (l *Ledger) available(b *bucket, sp *spec) int64 {
	switch sp.kind {
	case kToken, kRamp:
		return floorDiv(b.Level, sp.period)
	case kRolling:
		return sp.capacity - l.st.Rolls[b.Ext].Sum
	}
	return b.Level
}

// fitAt estimates the log time at which bucket b could cover amount units
// (plus reserve), or 0 when only an event (not time) can free capacity.
func (l *Ledger) fitAt(b *bucket, sp *spec, amount, reserve, now int64) int64 {
	switch sp.kind {
	case kToken:
		need := min(mulSat(amount+reserve, sp.period), sp.burst) // see fits
		return now + (need-b.Level+sp.capacity-1)/sp.capacity
	case kRamp:
		rate := l.st.Ramps[b.Ext].Rate
		need := min(mulSat(amount, sp.period), rampBurst(rate, sp.window))
		return now + (need-b.Level+rate-1)/rate
	case kFixed:
		w := floorDiv(now-sp.offset, sp.period)
		return (w+1)*sp.period + sp.offset
	case kRolling:
		rs := &l.st.Rolls[b.Ext]
		n := int64(len(rs.Ring))
		over := rs.Sum + amount + reserve - sp.capacity
		for s := rs.Cur - n + 1; s <= rs.Cur; s++ {
			if s >= 0 {
				over -= rs.Ring[s%n]
			}
			if over <= 0 {
				// Slot s leaves the window when slot s+n begins.
				return (s + n) * sp.slotMs
			}
		}
		return now + sp.period
	}
	return 0
}

// fits reports whether b can cover amount units keeping reserve units back.
//
// A token or ramp bucket covers a request larger than its window (amount +
// reserve above the burst) when it is full: the grant then takes the level
// below zero, and the debt is repaid from the refill before anything else
// fits (GCRA with a large increment). The window paces traffic; it does not
// make a request that the period's capacity holds inadmissible. The
// provider's own window bucket admits such a request the same way (the
// simulator's: "a request larger than the capacity is admitted only when
// the bucket is full"), so a ledger bucket no fuller than the provider's
// never sends one the provider refuses (README, "Requests larger than the
// window").
func (l *Ledger) fits(b *bucket, sp *spec, amount, reserve int64) bool {
	switch sp.kind {
	case kToken:
		// amount ≤ maxUnits and reserve ≤ capacity keep this below 2^62.
		return b.Level >= min((amount+reserve)*sp.period, sp.burst)
	case kRamp:
		return b.Level >= min((amount+reserve)*sp.period, rampBurst(l.st.Ramps[b.Ext].Rate, sp.window))
	case kRolling:
		return l.st.Rolls[b.Ext].Sum+amount+reserve <= sp.capacity
	}
	return b.Level >= amount+reserve
}

// debit takes amount units from b (the caller checked fits, or forces).
func (l *Ledger) debit(b *bucket, sp *spec, amount int64, now int64) {
	switch sp.kind {
	case kToken, kRamp:
		b.Level = clampSat(b.Level - amount*sp.period) // amount ≤ maxUnits (checked or clamped)
	case kRolling:
		rs := &l.st.Rolls[b.Ext]
		rs.Ring[rs.Cur%int64(len(rs.Ring))] += amount
		rs.Sum += amount
	default:
		b.Level = clampSat(b.Level - amount)
	}
}

// credit returns delta units to b for a grant made at grantMs (negative
// delta is overage, which becomes debt). A refund never raises a level above
// its burst, and never reaches a fixed window or rolling slot other than the
// one charged (that would create capacity the window never had).
func (l *Ledger) credit(b *bucket, sp *spec, delta, grantMs, now int64) {
	if delta == 0 {
		return
	}
	switch sp.kind {
	case kToken:
		b.Level = min(sp.burst, clampSat(b.Level+mulSat(delta, sp.period)))
	case kRamp:
		b.Level = min(rampBurst(l.st.Ramps[b.Ext].Rate, sp.window), clampSat(b.Level+mulSat(delta, sp.period)))
	case kFixed:
		if delta > 0 && floorDiv(grantMs-sp.offset, sp.period) != floorDiv(now-sp.offset, sp.period) {
			return
		}
		b.Level = min(sp.capacity, clampSat(b.Level+delta))
	case kRolling:
		rs := &l.st.Rolls[b.Ext]
		n := int64(len(rs.Ring))
		if delta < 0 {
			rs.Ring[rs.Cur%n] -= delta
			rs.Sum -= delta
			return
		}
		s := grantMs / sp.slotMs
		if s > rs.Cur-n && s <= rs.Cur {
			d := min(delta, rs.Ring[s%n])
			rs.Ring[s%n] -= d
			rs.Sum -= d
		}
	case kConcurrency:
		b.Level = min(sp.capacity, b.Level+delta)
	}
}
