package estimate

import (
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names (tiktoken's).
const (
	EncodingO200k  = "o200k_base"
	EncodingCL100k = "cl100k_base"
)

func init() {
	// There is no network at run time: every tiktoken encoding must come from
	// the embedded offline loader (DESIGN.md §6). Set it before anything in
	// the process can call tiktoken.GetEncoding.
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
}

// bpeEncoding counts tokens of one tiktoken encoding. It reproduces
// tiktoken's pre-tokenizer regex with a hand-written scanner and runs the
// byte-pair merge over the same mergeable ranks as tiktoken-go, so counts are
// identical (checked by TestTokenizerMatchesTiktoken and a differential fuzz
// target) at a fraction of the cost of tiktoken-go's backtracking regexp.
type bpeEncoding struct {
	name  string
	o200k bool // o200k pre-tokenizer rules instead of cl100k's
	ranks *rankTable
	// merged caches the token counts of pieces that are not one token
	// (the byte-pair merge's result), by the piece's hash: a word the
	// vocabulary splits ("Sluice", a name, an identifier) recurs across
	// the requests of one deployment, and its merge is a lookup per pair
	// and per merge step, where the cache is one comparison. An entry
	// holds its piece, so a hit is exact; a colliding piece replaces it.
	// Bounded: pieceCacheSize entries of at most smallPiece bytes.
	merged *[pieceCacheSize]atomic.Pointer[pieceCount]
	// texts caches the counts of whole texts of textCacheMin–textCacheMax
	// bytes (nil: none), above the piece cache: a deployment's system
	// prompts, templates and tool schemas recur request after request,
	// and a hit costs a hash and a comparison of the text instead of the
	// pre-tokenizer's scan and a piece lookup per word.
	texts *textCache
}

// textCache is bpeEncoding.texts: textCacheSize entries, each holding its
// text (a copy), so a hit is exact, like the piece cache's. A text is
// kept only at its second sighting (its hash is first noted in seen),
// so that one-off texts, most of a chat's user turns, cost an atomic
// store and no copy, and do not evict the texts that recur. A text whose
// slot another holds replaces it at its next sighting. Safe for
// concurrent use: every slot is an atomic word. Bounded: 256 texts of at
// most 32 KiB (8 MiB per encoding at worst) and 32 KiB of hashes.
type textCache struct {
	entries [textCacheSize]atomic.Pointer[pieceCount]
	seen    [textSeenSize]atomic.Uint64
}

// Bounds of textCache: the entries (a power of two), the hashes of texts
// seen once (a power of two), and the sizes of text kept. Under 128 bytes
// the scan is about as cheap as the hash and the copy; over 32 KiB a text
// is rarely sent twice, and would pin too much.
const (
	textCacheSize = 1 << 8
	textSeenSize  = 1 << 12
	textCacheMin  = 128
	textCacheMax  = 32 << 10
)

// pieceCacheSize is the number of entries of bpeEncoding.merged (a power
// of two): at most 4,096 × 64 bytes of pieces per encoding.
const pieceCacheSize = 1 << 12

// pieceCount is one entry of bpeEncoding.merged and of textCache.
type pieceCount struct {
	piece string
	n     int
}

type lazyEncoding struct {
	once sync.Once
	enc  *bpeEncoding
	err  error
}

var encodings = map[string]*lazyEncoding{
	EncodingO200k:  {},
	EncodingCL100k: {},
}

// getEncoding loads an encoding once per process and caches it.
func getEncoding(name string) (*bpeEncoding, error) {
	l, ok := encodings[name]
	if !ok {
		return nil, fmt.Errorf("estimate: unknown encoding %q", name)
	}
	l.once.Do(func() {
		initRuneClasses()
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(name + ".tiktoken")
		if err != nil {
			l.err = fmt.Errorf("estimate: load %s: %w", name, err)
			return
		}
		t, err := newRankTable(ranks)
		if err != nil {
			l.err = fmt.Errorf("estimate: load %s: %w", name, err)
			return
		}
		l.enc = &bpeEncoding{name: name, o200k: name == EncodingO200k, ranks: t,
			merged: new([pieceCacheSize]atomic.Pointer[pieceCount]), texts: new(textCache)}
	})
	return l.enc, l.err
}

// Count returns the number of tokens of text (special tokens are treated as
// ordinary text, as the providers do for user content).
func (e *bpeEncoding) Count(text string) int {
	if e.texts == nil || len(text) < textCacheMin || len(text) > textCacheMax {
		return e.count(text)
	}
	h := maphash.String(e.ranks.seed, text)
	slot := &e.texts.entries[h&(textCacheSize-1)]
	if tc := slot.Load(); tc != nil && tc.piece == text {
		return tc.n
	}
	n := e.count(text)
	// seen holds h|1, so that an empty word is never a text's mark.
	if mark := &e.texts.seen[(h>>8)&(textSeenSize-1)]; mark.Load() == h|1 {
		slot.Store(&pieceCount{piece: strings.Clone(text), n: n}) // text is a window on the body
	} else {
		mark.Store(h | 1)
	}
	return n
}

// count is Count without the text cache.
func (e *bpeEncoding) count(text string) int {
	n := 0
	for p := 0; p < len(text); {
		var q int
		if e.o200k {
			q = nextPieceO200k(text, p)
		} else {
			q = nextPieceCL100k(text, p)
		}
		if q <= p { // cannot happen; guard against an infinite loop
			q = p + 1
		}
		n += e.countPiece(text[p:q])
		p = q
	}
	return n
}

func (e *bpeEncoding) countPiece(piece string) int {
	if len(piece) == 1 {
		return 1
	}
	h := maphash.String(e.ranks.seed, piece)
	if _, ok := e.ranks.lookupHash(piece, h); ok {
		return 1
	}
	if len(piece) > smallPiece {
		return e.mergeLarge(piece) // rare, and not kept: the cache's bound is per entry too
	}
	var slot *atomic.Pointer[pieceCount]
	if e.merged != nil {
		slot = &e.merged[h&(pieceCacheSize-1)]
		if pc := slot.Load(); pc != nil && pc.piece == piece {
			return pc.n
		}
	}
	n := e.mergeSmall(piece)
	if slot != nil {
		// A copy: piece is a window on the request's body.
		slot.Store(&pieceCount{piece: strings.Clone(piece), n: n})
	}
	return n
}

const smallPiece = 64

func (e *bpeEncoding) rank(s string) int {
	if r, ok := e.ranks.lookup(s); ok {
		return r
	}
	return math.MaxInt
}

// mergeSmall is tiktoken's quadratic byte-pair merge, on the stack.
func (e *bpeEncoding) mergeSmall(piece string) int {
	var bounds [smallPiece + 1]int
	var rk [smallPiece]int
	m := len(piece) // number of parts
	for i := 0; i <= m; i++ {
		bounds[i] = i
	}
	for k := 0; k < m-1; k++ {
		rk[k] = e.rank(piece[bounds[k]:bounds[k+2]])
	}
	for m > 1 {
		minR, minK := math.MaxInt, -1
		for k := 0; k < m-1; k++ {
			if rk[k] < minR {
				minR, minK = rk[k], k
			}
		}
		if minK < 0 {
			break
		}
		k := minK
		copy(bounds[k+1:m], bounds[k+2:m+1])
		copy(rk[k+1:m-1], rk[k+2:m])
		m--
		if k < m-1 {
			rk[k] = e.rank(piece[bounds[k]:bounds[k+2]])
		} else {
			rk[k] = math.MaxInt
		}
		if k > 0 {
			rk[k-1] = e.rank(piece[bounds[k-1]:bounds[k+1]])
		}
	}
	return m
}

type mergeCand struct {
	rank  int
	start int32 // start byte of the left part
	end   int32 // end byte of the right part when the candidate was made
}

type mergeScratch struct {
	next, prev []int32 // linked list of part starts; next[start] = start of next part or n
	heap       []mergeCand
}

var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

func candLess(a, b mergeCand) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.start < b.start)
}

// mergeLarge gives the same result as mergeSmall (lowest rank first, leftmost
// on ties) in O(n log n), so that a long run of letters or spaces cannot make
// estimation quadratic.
func (e *bpeEncoding) mergeLarge(piece string) int {
	n := int32(len(piece))
	s := scratchPool.Get().(*mergeScratch)
	defer scratchPool.Put(s)
	if cap(s.next) < int(n)+1 {
		s.next = make([]int32, n+1)
		s.prev = make([]int32, n+1)
	}
	next, prev := s.next[:n+1], s.prev[:n+1]
	h := s.heap[:0]
	push := func(c mergeCand) {
		h = append(h, c)
		i := len(h) - 1
		for i > 0 {
			p := (i - 1) / 2
			if !candLess(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() mergeCand {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		i := 0
		for {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(h) && candLess(h[l], h[m]) {
				m = l
			}
			if r < len(h) && candLess(h[r], h[m]) {
				m = r
			}
			if m == i {
				break
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
		return top
	}
	for i := int32(0); i <= n; i++ {
		next[i] = i + 1
		prev[i] = i - 1
	}
	pairEnd := func(start int32) int32 { // end of the part after the one at start
		r := next[start]
		if r >= n {
			return -1
		}
		return next[r]
	}
	for i := int32(0); i+1 < n; i++ {
		if r := e.rank(piece[i : i+2]); r != math.MaxInt {
			push(mergeCand{rank: r, start: i, end: i + 2})
		}
	}
	parts := int(n)
	for len(h) > 0 {
		c := pop()
		if prev[c.start] == -2 || pairEnd(c.start) != c.end {
			continue // stale
		}
		// merge the part at c.start with the next one
		r := next[c.start]
		next[c.start] = next[r]
		if next[r] <= n {
			prev[next[r]] = c.start
		}
		prev[r] = -2
		parts--
		if pe := pairEnd(c.start); pe >= 0 {
			if rk := e.rank(piece[c.start:pe]); rk != math.MaxInt {
				push(mergeCand{rank: rk, start: c.start, end: pe})
			}
		}
		if p := prev[c.start]; p >= 0 {
			pe := next[c.start]
			if rk := e.rank(piece[p:pe]); rk != math.MaxInt {
				push(mergeCand{rank: rk, start: p, end: pe})
			}
		}
	}
	s.heap = h[:0]
	return parts
}

// Rune classes used by the pre-tokenizer regexes. \s is unicode.IsSpace
// (that is what regexp2, tiktoken-go's regex engine, uses).
const (
	cL  = 1 << iota // \p{L}
	cN              // \p{N}
	cS              // \s
	cU              // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cW              // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	cNL             // \r or \n
)

var (
	classOnce sync.Once
	bmpClass  []uint8
)

func initRuneClasses() {
	classOnce.Do(func() {
		t := make([]uint8, 0x10000)
		for r := rune(0); r < 0x10000; r++ {
			t[r] = computeClass(r)
		}
		bmpClass = t
	})
}

func computeClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= cL
	}
	if unicode.IsNumber(r) {
		c |= cN
	}
	if unicode.IsSpace(r) {
		c |= cS
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cU
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cW
	}
	if r == '\r' || r == '\n' {
		c |= cNL
	}
	return c
}

func classOf(r rune) uint8 {
	if r >= 0 && r < 0x10000 {
		if bmpClass != nil {
			return bmpClass[r]
		}
	}
	return computeClass(r)
}

// at decodes the rune at byte offset i; size 0 at the end of s. Invalid
// UTF-8 decodes as U+FFFD of size 1, which classifies as "other".
func at(s string, i int) (rune, uint8, int) {
	if i >= len(s) {
		return -1, 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), classOf(rune(b)), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, classOf(r), n
}

func isOther(c uint8) bool { return c&(cL|cN|cS) == 0 }

// optPrefix reports [^\r\n\p{L}\p{N}].
func optPrefix(c uint8) bool { return c&(cL|cN|cNL) == 0 }

func scanClass(s string, i int, want uint8) int {
	for {
		_, c, n := at(s, i)
		if n == 0 || c&want == 0 {
			return i
		}
		i += n
	}
}

func scanOther(s string, i int) int {
	for {
		_, c, n := at(s, i)
		if n == 0 || !isOther(c) {
			return i
		}
		i += n
	}
}

func scanBytes(s string, i int, set string) int {
	for i < len(s) {
		ok := false
		for j := 0; j < len(set); j++ {
			if s[i] == set[j] {
				ok = true
				break
			}
		}
		if !ok {
			break
		}
		i++
	}
	return i
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i and returns its end
// or -1. Case folding follows regexp2 (unicode.ToLower of the input rune).
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	r1, _, n1 := at(s, i+1)
	if n1 == 0 {
		return -1
	}
	switch unicode.ToLower(r1) {
	case 's', 't', 'm', 'd':
		return i + 1 + n1
	case 'r', 'v':
		if r2, _, n2 := at(s, i+1+n1); n2 > 0 && unicode.ToLower(r2) == 'e' {
			return i + 1 + n1 + n2
		}
	case 'l':
		if r2, _, n2 := at(s, i+1+n1); n2 > 0 && unicode.ToLower(r2) == 'l' {
			return i + 1 + n1 + n2
		}
	}
	return -1
}

// whitespacePiece handles the three trailing alternatives shared by both
// encodings: \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace rune at p.
func whitespacePiece(s string, p int) int {
	q, lastNL, lastStart, runes := p, -1, p, 0
	for {
		r, c, n := at(s, q)
		if n == 0 || c&cS == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = q
		}
		lastStart = q
		runes++
		q += n
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	if q == len(s) || runes < 2 {
		return q
	}
	return lastStart
}

// nextPieceCL100k returns the end of the cl100k_base pre-token at p:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func nextPieceCL100k(s string, p int) int {
	_, c0, n0 := at(s, p)
	if e := contraction(s, p); e > 0 {
		return e
	}
	if c0&cL != 0 {
		return scanClass(s, p+n0, cL)
	}
	if optPrefix(c0) {
		if _, c1, n1 := at(s, p+n0); n1 > 0 && c1&cL != 0 {
			return scanClass(s, p+n0+n1, cL)
		}
	}
	if c0&cN != 0 {
		q := p + n0
		for k := 1; k < 3; k++ {
			_, c, n := at(s, q)
			if n == 0 || c&cN == 0 {
				break
			}
			q += n
		}
		return q
	}
	if s[p] == ' ' {
		if _, c1, n1 := at(s, p+1); n1 > 0 && isOther(c1) {
			return scanBytes(s, scanOther(s, p+1+n1), "\r\n")
		}
	}
	if isOther(c0) {
		return scanBytes(s, scanOther(s, p+n0), "\r\n")
	}
	return whitespacePiece(s, p)
}

// o200kWord1 matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
// followed by an optional contraction, at i, with backtracking semantics.
func o200kWord1(s string, i int) int {
	q, lastW := i, -1
	for {
		_, c, n := at(s, q)
		if n == 0 || c&cU == 0 {
			break
		}
		if c&cW != 0 {
			lastW = q
		}
		q += n
	}
	start := -1
	if _, c, n := at(s, q); n > 0 && c&cW != 0 {
		start = q
	} else if lastW >= 0 {
		start = lastW
	} else {
		return -1
	}
	e := scanClass(s, start, cW)
	if ce := contraction(s, e); ce > 0 {
		return ce
	}
	return e
}

// o200kWord2 matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
// followed by an optional contraction.
func o200kWord2(s string, i int) int {
	q := scanClass(s, i, cU)
	if q == i {
		return -1
	}
	e := scanClass(s, q, cW)
	if ce := contraction(s, e); ce > 0 {
		return ce
	}
	return e
}

// nextPieceO200k returns the end of the o200k_base pre-token at p; see
// tiktoken's o200k_base pattern (two word alternatives with an optional
// non-letter prefix, \p{N}{1,3}, ` ?[^\s\p{L}\p{N}]+[\r\n/]*`, whitespace).
func nextPieceO200k(s string, p int) int {
	_, c0, n0 := at(s, p)
	pre := optPrefix(c0)
	for _, word := range [2]func(string, int) int{o200kWord1, o200kWord2} {
		if pre {
			if e := word(s, p+n0); e > 0 {
				return e
			}
		}
		if e := word(s, p); e > 0 {
			return e
		}
	}
	if c0&cN != 0 {
		q := p + n0
		for k := 1; k < 3; k++ {
			_, c, n := at(s, q)
			if n == 0 || c&cN == 0 {
				break
			}
			q += n
		}
		return q
	}
	if s[p] == ' ' {
		if _, c1, n1 := at(s, p+1); n1 > 0 && isOther(c1) {
			return scanBytes(s, scanOther(s, p+1+n1), "\r\n/")
		}
	}
	if isOther(c0) {
		return scanBytes(s, scanOther(s, p+n0), "\r\n/")
	}
	return whitespacePiece(s, p)
}
