package ledger

// The window of a remaining-only bucket (issue 20, Azure's fixed windows).
//
// Azure OpenAI reports x-ratelimit-remaining-* without a limit and enforces
// its per-minute quota over short windows (1 or 10 s; the simulator's
// Azure dialect counts fixed 10 s windows). A token bucket paced at the
// learned rate lets up to its burst plus a window's refill into one
// window-long interval, twice the window's share: a fixed window aligned
// with a full bucket took a third 264-token request where the provider's
// 666 tokens hold two (noisy-neighbor-handwritten through
// deploy/examples/sluice.yaml: 2 provider 429s in 10 Azure calls a run).
// Nothing in these headers says where a provider's windows start, so a
// bucket learned from remaining counts alone also checks every trailing
// window: what it granted in the last window_ms (counted in slideSlots
// whole slots plus the current one, so the sum never under-counts the
// window and covers up to a slot more) plus the request must fit the
// window's share of the learned capacity (holdUnits). Any fixed window
// of the provider is such a trailing window at its end, so none is
// overfilled by the grants' own times; the extra slot (a tenth of the
// window) absorbs the grants' varying delay to the provider. An empty
// window admits any request (one larger than the window still waits only
// for a full bucket: "Requests larger than the window").

// slideSlots is how many slots a window is counted in.
const slideSlots = 10

// slideWin is a learned bucket's grants over its trailing window:
// Ring[Cur % len] is the current slot of SlotMs.
type slideWin struct {
	SlotMs int64                 `json:"ms,omitempty"`
	Cur    int64                 `json:"c,omitempty"`
	Ring   [slideSlots + 1]int64 `json:"r,omitzero"`
}

// slotFor is the slot length of a window of windowMs.
func slotFor(windowMs int64) int64 { return max(1, windowMs/slideSlots) }

// roll moves w to log time now, clearing the slots it passes; a window
// of another slot length starts empty.
func (w *slideWin) roll(now, slotMs int64) {
	if w.SlotMs != slotMs {
		*w = slideWin{SlotMs: slotMs, Cur: now / slotMs}
		return
	}
	c := now / slotMs
	if c <= w.Cur {
		return
	}
	for k := w.Cur + 1; k <= c && k <= w.Cur+slideSlots+1; k++ {
		w.Ring[k%(slideSlots+1)] = 0
	}
	w.Cur = c
}

// sum is what w counts in its trailing window.
func (w *slideWin) sum() int64 {
	var t int64
	for _, v := range w.Ring {
		t = min(maxAmount, t+v)
	}
	return t
}

// fitAt returns when amount fits w's window of limit units (now when it
// does; w rolled to now).
func (w *slideWin) fitAt(amount, limit, now int64) int64 {
	over := w.sum() + amount - limit
	if over <= 0 || w.sum() == 0 {
		return now
	}
	n := int64(slideSlots + 1)
	for s := w.Cur - n + 1; s <= w.Cur; s++ {
		if s >= 0 {
			over -= w.Ring[s%n]
		}
		if over <= 0 || s == w.Cur {
			// Slot s leaves the window when slot s+n begins.
			return (s + n) * w.SlotMs
		}
	}
	return (w.Cur + n) * w.SlotMs
}

// slideEntry returns the learned entry whose window bucket bi of spec sp
// checks, or -1 (no window: sp.slide is false).
func (l *Ledger) slideEntry(ni int32, sp *spec) int {
	if !sp.slide {
		return -1
	}
	return l.learnedIdx(ni, int(sp.dim))
}

// slideFitAt returns when a units fit the window of node ni's bucket of
// spec sp (now when they do, or when it has none).
func (l *Ledger) slideFitAt(ni int32, sp *spec, a int64) int64 {
	now := l.st.Now
	i := l.slideEntry(ni, sp)
	if i < 0 {
		return now
	}
	w := &l.st.Learned[i].Win
	w.roll(now, slotFor(sp.window))
	return w.fitAt(a, sp.holdUnits, now)
}

// slideCharge counts a grant of a units in the window of node ni's
// bucket of spec sp.
func (l *Ledger) slideCharge(ni int32, sp *spec, a int64) {
	i := l.slideEntry(ni, sp)
	if i < 0 {
		return
	}
	w := &l.st.Learned[i].Win
	w.roll(l.st.Now, slotFor(sp.window))
	s := &w.Ring[w.Cur%(slideSlots+1)]
	*s = min(maxAmount, *s+a)
}
