package estimate

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	tiktoken "github.com/pkoukk/tiktoken-go"
)

var (
	refMu  sync.Mutex
	refEnc = map[string]*tiktoken.Tiktoken{}
)

// reference returns tiktoken-go's own encoder (the oracle our counter must match).
func reference(t testing.TB, name string) *tiktoken.Tiktoken {
	refMu.Lock()
	defer refMu.Unlock()
	if e, ok := refEnc[name]; ok {
		return e
	}
	e, err := tiktoken.GetEncoding(name)
	if err != nil {
		t.Fatalf("tiktoken.GetEncoding(%s): %v", name, err)
	}
	refEnc[name] = e
	return e
}

func mustEncoding(t testing.TB, name string) *bpeEncoding {
	e, err := getEncoding(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var tokenizerCorpus = []string{
	"",
	"hello world",
	"Hello, world!",
	"tiktoken is great!",
	"antidisestablishmentarianism",
	"I'm here, you're there, they'll go, we've been, it's done, he'd say, don'T, I'M, SHE'LL",
	"'s 't 're 've 'm 'll 'd 'x ' '",
	"12345678901 3.14159 1,000,000",
	"  leading spaces and trailing   ",
	"tabs\tand\nnewlines\r\n\r\n  \n\t x",
	"line1\n\n\nline2   \n   line3",
	"func main() {\n\tfmt.Println(\"hi\") // comment\n}\n",
	"https://example.com/a/b/c?x=1&y=2#frag //// ///\n/",
	"日本語のテキストです。中文文本。한국어 텍스트",
	"Ünïcödé àccents, Ελληνικά, русский язык, عربى, עברית",
	"emoji 😀👍🏽🇳🇱 and ZWJ 👨‍👩‍👧‍👦",
	"combining e\u0301 a\u0300\u0301 \u0301\u0302 start",
	"CamelCaseWordsHTTPServerXMLParser ABCdef DEFghi ǅungla ʰello",
	"\u00a0nbsp\u2003em\u3000ideo",
	"<|endoftext|> <|im_start|>user",
	strings.Repeat("a", 300),
	strings.Repeat(" ", 300) + "x",
	strings.Repeat("ab12!", 100),
	strings.Repeat("的", 200),
	"{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},\"required\":[\"location\"]}",
}

func TestTokenizerMatchesTiktoken(t *testing.T) {
	for _, name := range []string{EncodingCL100k, EncodingO200k} {
		enc := mustEncoding(t, name)
		ref := reference(t, name)
		for _, s := range tokenizerCorpus {
			want := len(ref.EncodeOrdinary(s))
			if got := enc.Count(s); got != want {
				t.Errorf("%s: Count(%q) = %d, tiktoken-go = %d", name, s, got, want)
			}
		}
	}
}

// Exact counts for known strings (values from OpenAI's tiktoken).
func TestTokenizerKnownCounts(t *testing.T) {
	tests := []struct {
		enc  string
		text string
		want int
	}{
		{EncodingCL100k, "hello world", 2},
		{EncodingCL100k, "tiktoken is great!", 6},
		{EncodingCL100k, "antidisestablishmentarianism", 6},
		{EncodingCL100k, "2 + 2 = 4", 7},
		{EncodingO200k, "hello world", 2},
		{EncodingO200k, "tiktoken is great!", 6},
		{EncodingO200k, "antidisestablishmentarianism", 6},
		{EncodingO200k, "2 + 2 = 4", 7},
	}
	for _, tt := range tests {
		if got := mustEncoding(t, tt.enc).Count(tt.text); got != tt.want {
			t.Errorf("%s Count(%q) = %d, want %d", tt.enc, tt.text, got, tt.want)
		}
	}
}

func TestMergeLargeMatchesSmall(t *testing.T) {
	for _, name := range []string{EncodingCL100k, EncodingO200k} {
		enc := mustEncoding(t, name)
		for _, s := range []string{"abcdefghij", "aaaaaaaaaaaaa", "zxqvjkwpzxqvjk", "  \t\t  ", "ababababab", "日本語テキスト"} {
			if a, b := enc.mergeSmall(s), enc.mergeLarge(s); a != b {
				t.Errorf("%s %q: small %d large %d", name, s, a, b)
			}
		}
	}
}

func FuzzTokenizerMatchesTiktoken(f *testing.F) {
	for _, s := range tokenizerCorpus {
		if len(s) < 200 {
			f.Add(s)
		}
	}
	cl, o2 := mustEncoding(f, EncodingCL100k), mustEncoding(f, EncodingO200k)
	rcl, ro2 := reference(f, EncodingCL100k), reference(f, EncodingO200k)
	f.Fuzz(func(t *testing.T, s string) {
		// Request text is always valid UTF-8 after JSON decoding. Inputs
		// stay short because the reference (tiktoken-go on regexp2, a
		// backtracking engine) can take seconds on long pathological
		// strings, and an input still running when -fuzztime ends fails
		// the run with "context deadline exceeded" though nothing is wrong.
		if !utf8.ValidString(s) || len(s) > 300 {
			return
		}
		if got, want := cl.Count(s), len(rcl.EncodeOrdinary(s)); got != want {
			t.Fatalf("cl100k Count(%q) = %d, want %d", s, got, want)
		}
		if got, want := o2.Count(s), len(ro2.EncodeOrdinary(s)); got != want {
			t.Fatalf("o200k Count(%q) = %d, want %d", s, got, want)
		}
		for _, enc := range []*bpeEncoding{cl, o2} {
			if len(s) > 1 && len(s) <= smallPiece {
				if a, b := enc.mergeSmall(s), enc.mergeLarge(s); a != b {
					t.Fatalf("%s merge %q small %d large %d", enc.name, s, a, b)
				}
			}
		}
	})
}

// TestPieceCacheExact: counts through the merged-piece cache, cold and
// warm, are the counts without it, and an entry another piece left in a
// piece's slot is not taken for it.
func TestPieceCacheExact(t *testing.T) {
	for _, name := range []string{EncodingCL100k, EncodingO200k} {
		enc := mustEncoding(t, name)
		bare := &bpeEncoding{name: enc.name, o200k: enc.o200k, ranks: enc.ranks} // no cache
		for pass := range 2 {
			for _, s := range tokenizerCorpus {
				if got, want := enc.Count(s), bare.Count(s); got != want {
					t.Fatalf("%s pass %d: Count(%q) = %d, without the cache %d", name, pass, s, got, want)
				}
			}
		}
		const piece = " Sluice"
		want := bare.countPiece(piece)
		if want < 2 {
			t.Fatalf("%s: %q is %d token(s); the test needs a merged piece", name, piece, want)
		}
		slot := &enc.merged[maphash.String(enc.ranks.seed, piece)&(pieceCacheSize-1)]
		slot.Store(&pieceCount{piece: " Sluicf", n: 99})
		if got := enc.countPiece(piece); got != want {
			t.Fatalf("%s: countPiece(%q) with another piece in its slot = %d, want %d", name, piece, got, want)
		}
		if pc := slot.Load(); pc.piece != piece || pc.n != want {
			t.Fatalf("%s: slot holds %q → %d after the miss, want %q → %d", name, pc.piece, pc.n, piece, want)
		}
	}
}

// textCacheCorpus is many texts around and inside the text cache's
// bounds: the tokenizer corpus repeated to sizes, and prose, code and
// JSON of pseudo-random words (deterministic), from 100 bytes to 40 KiB.
func textCacheCorpus() []string {
	words := []string{"Sluice", " the", " quota", " governor", "'s", " ledger", ",", " 42", "\n", "  ", "日本語", " ÜBER", "{\"a\":", "1}", "\t", " don't", "😀", " HTTPServer", " 3.14159", "//"}
	var out []string
	for _, s := range tokenizerCorpus {
		if s != "" {
			out = append(out, strings.Repeat(s, textCacheMin/len(s)+1))
		}
	}
	x := uint32(2463534242)
	for _, size := range []int{100, textCacheMin - 1, textCacheMin, textCacheMin + 1, 200, 875, 1000, 4000, 16 << 10, textCacheMax - 1, textCacheMax, textCacheMax + 1, 40 << 10} {
		for range 8 {
			var sb strings.Builder
			for sb.Len() < size {
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				sb.WriteString(words[x%uint32(len(words))])
			}
			s := sb.String()
			for len(s) > size && !utf8.ValidString(s[:size]) {
				size++ // do not cut a rune
			}
			out = append(out, s[:min(size, len(s))])
		}
	}
	return out
}

// TestTextCacheExact: counts through the text cache, at the first,
// second and later sightings of a text and from goroutines at once, are
// the counts without it; a text is kept from its second sighting only,
// and only within its bounds; an entry another text left in a text's
// slot is not taken for it.
func TestTextCacheExact(t *testing.T) {
	corpus := textCacheCorpus()
	for _, name := range []string{EncodingCL100k, EncodingO200k} {
		enc := mustEncoding(t, name)
		bare := &bpeEncoding{name: enc.name, o200k: enc.o200k, ranks: enc.ranks} // no cache
		cached := &bpeEncoding{name: enc.name, o200k: enc.o200k, ranks: enc.ranks, merged: enc.merged, texts: new(textCache)}
		want := make([]int, len(corpus))
		for i, s := range corpus {
			want[i] = bare.Count(s)
		}
		slotOf := func(s string) *atomic.Pointer[pieceCount] {
			return &cached.texts.entries[maphash.String(enc.ranks.seed, s)&(textCacheSize-1)]
		}
		for sighting := 1; sighting <= 3; sighting++ {
			var wg sync.WaitGroup
			for g := range 4 { // the same texts from 4 goroutines at the third sighting
				if sighting < 3 && g > 0 {
					break
				}
				wg.Go(func() {
					for i, s := range corpus {
						if got := cached.Count(s); got != want[i] {
							t.Errorf("%s sighting %d: Count(%d bytes) = %d, without the cache %d", name, sighting, len(s), got, want[i])
						}
					}
				})
			}
			wg.Wait()
			if sighting > 1 {
				continue
			}
			for _, s := range corpus { // after one sighting, nothing is kept
				if tc := slotOf(s).Load(); tc != nil && tc.piece == s {
					t.Fatalf("%s: a %d-byte text is kept after one sighting", name, len(s))
				}
			}
		}
		kept := 0
		for _, s := range corpus {
			tc := slotOf(s).Load()
			in := len(s) >= textCacheMin && len(s) <= textCacheMax
			switch {
			case tc != nil && tc.piece == s && !in:
				t.Fatalf("%s: a %d-byte text is kept, outside %d–%d", name, len(s), textCacheMin, textCacheMax)
			case tc != nil && tc.piece == s:
				kept++
			}
		}
		if kept < textCacheSize/4 {
			t.Fatalf("%s: %d texts kept after three sightings of %d", name, kept, len(corpus))
		}
		s := corpus[len(corpus)/2]
		other := s[:len(s)-1] + "!"
		slotOf(s).Store(&pieceCount{piece: other, n: 1})
		if got, w := cached.Count(s), bare.Count(s); got != w {
			t.Fatalf("%s: Count with another text in its slot = %d, want %d", name, got, w)
		}
	}
}
