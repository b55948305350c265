package ledger

// resIndex maps (request id, attempt) to the reservation's index in
// state.Res. It is a derived index (rebuilt on restore, never in a
// snapshot) and replaces a Go map keyed by strings, which cost a string hash
// and compare per access on the grant hot path (a lookup and an insert per
// reserve, a lookup per reconcile, a delete per eviction).
//
// Open addressing with linear probing over a power-of-two table; a slot
// holds the key's hash and the reservation index, so a probe compares
// strings only when the hashes agree, and a delete (which knows the index)
// compares none. Deletion shifts later entries back (no tombstones), so
// probe sequences stay short however many reservations come and go. The
// table grows at 1/2 load (short probes, 8 bytes a slot) and never
// shrinks, like a Go map.
type resIndex struct {
	slots []resSlot
	n     int // entries
}

type resSlot struct {
	h  uint32
	ri int32 // reservation index + 1; 0 = empty
}

const resIndexMin = 64

// resHash is the index hash of a reservation key (never stored).
func resHash(id string, attempt int32) uint32 {
	return uint32(fnvInt(fnvStr(fnvOffset, id), int64(attempt)) >> 32)
}

// get returns the reservation of (id, attempt).
func (x *resIndex) get(rs []res, h uint32, id string, attempt int32) (int32, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	mask := uint32(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s.ri == 0 {
			return 0, false
		}
		if s.h == h {
			if r := &rs[s.ri-1]; r.Attempt == attempt && r.RequestID == id {
				return s.ri - 1, true
			}
		}
	}
}

// put adds reservation ri under hash h; its key must not be in the index.
func (x *resIndex) put(h uint32, ri int32) {
	if (x.n+1)*2 > len(x.slots) {
		x.grow()
	}
	mask := uint32(len(x.slots) - 1)
	i := h & mask
	for x.slots[i].ri != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = resSlot{h: h, ri: ri + 1}
	x.n++
}

func (x *resIndex) grow() {
	old := x.slots
	x.slots = make([]resSlot, max(resIndexMin, 2*len(old)))
	mask := uint32(len(x.slots) - 1)
	for _, s := range old {
		if s.ri == 0 {
			continue
		}
		i := s.h & mask
		for x.slots[i].ri != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
}

// del removes reservation ri, indexed under hash h, if it is there.
func (x *resIndex) del(h uint32, ri int32) {
	if len(x.slots) == 0 {
		return
	}
	mask := uint32(len(x.slots) - 1)
	i := h & mask
	for {
		s := x.slots[i]
		if s.ri == 0 {
			return
		}
		if s.ri == ri+1 {
			break
		}
		i = (i + 1) & mask
	}
	x.n--
	// Backward shift: move each later entry of the run whose home is not
	// cyclically in (i, j] into the hole, until an empty slot ends the run.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := x.slots[j]
		if s.ri == 0 {
			break
		}
		k := s.h & mask
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = resSlot{}
}

// resFind returns the reservation of (id, attempt).
func (l *Ledger) resFind(id string, attempt int32) (int32, bool) {
	return l.resIdx.get(l.st.Res, resHash(id, attempt), id, attempt)
}
