package estimate

import (
	"testing"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// TestRankTableMatchesTheLoadersMap: every token of both encodings looks
// up to the loader's rank, and bytes that are no token are not found.
func TestRankTableMatchesTheLoadersMap(t *testing.T) {
	for _, name := range []string{EncodingO200k, EncodingCL100k} {
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(name + ".tiktoken")
		if err != nil {
			t.Fatal(err)
		}
		tab, err := newRankTable(ranks)
		if err != nil {
			t.Fatal(err)
		}
		for tok, want := range ranks {
			if got, ok := tab.lookup(tok); !ok || got != want {
				t.Fatalf("%s: lookup(%q) = %d, %v; want %d", name, tok, got, ok, want)
			}
		}
		for _, s := range []string{"", "antidisestablishmentarianism", " Sluice-not-a-token", "\xff\xfe\xfd\xfc"} {
			if _, inMap := ranks[s]; !inMap {
				if r, ok := tab.lookup(s); ok {
					t.Errorf("%s: lookup(%q) = %d, found; the loader has no such token", name, s, r)
				}
			}
		}
	}
}
