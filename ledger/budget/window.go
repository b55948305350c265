package budget

const dayMs = 86_400_000

// windowOf returns the window (or, for a rolling budget, the slot) of b
// that contains log time nowMs: [start, end).
func windowOf(b *Budget, nowMs int64) (start, end int64) {
	switch b.Window {
	case WindowMonth:
		y, m := civil(floorDiv(nowMs, dayMs))
		start = daysFromCivil(y, m, 1) * dayMs
		if m == 12 {
			y, m = y+1, 0
		}
		return start, daysFromCivil(y, m+1, 1) * dayMs
	case WindowRolling:
		slot := b.RollingMs / b.Slots
		start = floorDiv(nowMs, slot) * slot
		return start, start + slot
	}
	start = floorDiv(nowMs, dayMs) * dayMs
	return start, start + dayMs
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// civil returns the year and month of day z since 1970-01-01 (Howard
// Hinnant's days_from_civil inverse; no time package in a pure machine).
func civil(z int64) (y, m int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	m = mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m
}

// daysFromCivil returns the day since 1970-01-01 of y-m-d.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := m + 9
	if m > 2 {
		mp = m - 3
	}
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}
