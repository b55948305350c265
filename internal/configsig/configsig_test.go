package configsig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func signed(t *testing.T, s *Signer) schemas.ConfigChanged {
	t.Helper()
	cc := schemas.ConfigChanged{ConfigVersion: "admin-7", Source: "admin-api", Actor: "operator", Reason: "more capacity",
		Ledger: []byte(`{"scopes":[]}`), Change: "tenant.limits tenant=acme", Admission: []byte(`{"version":7}`)}
	s.Sign(&cc)
	return cc
}

// TestVerify: a change verifies only as its signer wrote it, under a key
// the verifier trusts. Every field is covered, and the wire encoding is not.
func TestVerify(t *testing.T) {
	writer, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	other, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	v := writer.Verifier()
	for _, tc := range []struct {
		name string
		edit func(cc *schemas.ConfigChanged)
		want error
	}{
		{"as signed", func(*schemas.ConfigChanged) {}, nil},
		{"unsigned", func(cc *schemas.ConfigChanged) { cc.Signature, cc.KeyID = nil, "" }, ErrUnsigned},
		{"signed by another key", func(cc *schemas.ConfigChanged) { other.Sign(cc) }, ErrUnknownKey},
		{"another key under the writer's key id", func(cc *schemas.ConfigChanged) { other.Sign(cc); cc.KeyID = writer.KeyID() }, ErrBadSignature},
		{"ledger document raised", func(cc *schemas.ConfigChanged) { cc.Ledger = []byte(`{"scopes":[{"capacity":100000000}]}`) }, ErrBadSignature},
		{"version", func(cc *schemas.ConfigChanged) { cc.ConfigVersion = "admin-8" }, ErrBadSignature},
		{"source", func(cc *schemas.ConfigChanged) { cc.Source = "file" }, ErrBadSignature},
		{"actor", func(cc *schemas.ConfigChanged) { cc.Actor = "mallory" }, ErrBadSignature},
		{"reason", func(cc *schemas.ConfigChanged) { cc.Reason = "" }, ErrBadSignature},
		{"change", func(cc *schemas.ConfigChanged) { cc.Change = "" }, ErrBadSignature},
		{"admission", func(cc *schemas.ConfigChanged) { cc.Admission = nil }, ErrBadSignature},
		// Length prefixes: moving bytes from one field to its neighbour
		// keeps the concatenation, not the message.
		{"bytes moved between fields", func(cc *schemas.ConfigChanged) { cc.Source, cc.Actor = "admin-apiop", "erator" }, ErrBadSignature},
		{"sequence added after signing", func(cc *schemas.ConfigChanged) { cc.Seq = 1 << 62 }, ErrBadSignature},
		{"signed sequence lowered", func(cc *schemas.ConfigChanged) { cc.Seq = 20; writer.Sign(cc); cc.Seq = 10 }, ErrBadSignature},
		{"signed with a sequence", func(cc *schemas.ConfigChanged) { cc.Seq = 20; writer.Sign(cc) }, nil},
		{"truncated signature", func(cc *schemas.ConfigChanged) { cc.Signature = cc.Signature[:10] }, ErrBadSignature},
		{"re-encoded with spaces", func(cc *schemas.ConfigChanged) {
			b, _ := json.MarshalIndent(cc, "", "  ")
			*cc = schemas.ConfigChanged{}
			if err := json.Unmarshal(b, cc); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := signed(t, writer)
			tc.edit(&cc)
			err := v.Verify(&cc)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestKeyFiles: the PEM files round-trip, a public file may hold several
// keys (rotation), and FromEnv derives the verifier from a lone signing key.
func TestKeyFiles(t *testing.T) {
	a, _ := Generate()
	b, _ := Generate()
	dir := t.TempDir()
	priv := filepath.Join(dir, "admin.key")
	pub := filepath.Join(dir, "admin.pub")
	if err := os.WriteFile(priv, a.PrivatePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, append(b.PublicPEM(), a.PublicPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	k, err := FromEnv(env(map[string]string{EnvSigningKey: priv}))
	if err != nil || k.Signer == nil || !k.Enforced() || k.Signer.KeyID() != a.KeyID() {
		t.Fatalf("signing key only: %+v, %v", k, err)
	}
	cc := signed(t, k.Signer)
	if err := k.Verifier.Verify(&cc); err != nil {
		t.Fatalf("own signature: %v", err)
	}

	k, err = FromEnv(env(map[string]string{EnvPublicKey: pub}))
	if err != nil || k.Signer != nil || len(k.Verifier.KeyIDs()) != 2 {
		t.Fatalf("public keys only: %+v, %v", k, err)
	}
	for _, s := range []*Signer{a, b} {
		cc := signed(t, s)
		if err := k.Verifier.Verify(&cc); err != nil {
			t.Fatalf("key %s of the file: %v", s.KeyID(), err)
		}
	}

	if k, err := FromEnv(env(nil)); err != nil || k.Enforced() || k.Signer != nil {
		t.Fatalf("no keys: %+v, %v", k, err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing file", map[string]string{EnvPublicKey: filepath.Join(dir, "nope")}, EnvPublicKey},
		{"public key as signing key", map[string]string{EnvSigningKey: pub}, "PRIVATE KEY"},
		{"private key as public key", map[string]string{EnvPublicKey: priv}, "PUBLIC KEY"},
	} {
		if _, err := FromEnv(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParseVerifier: no key file makes the parser panic, and whatever it
// accepts verifies nothing it did not sign.
func FuzzParseVerifier(f *testing.F) {
	s, _ := Generate()
	f.Add(s.PublicPEM())
	f.Add(s.PrivatePEM())
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseSigner(b)
		v, err := ParseVerifier(b)
		if err != nil {
			return
		}
		cc := schemas.ConfigChanged{Ledger: b, KeyID: KeyID(b), Signature: b}
		_ = v.Verify(&cc)
	})
}

// TestNextSeq: sequences increase whatever the clock does, and a change
// without one signs the message it did before sequences existed (so the
// changes already on a log still verify).
func TestNextSeq(t *testing.T) {
	s, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i, now := range []int64{1_000, 2_000, 2_000, 500, -7, 3_000} {
		got := s.NextSeq(now)
		if got <= last || now > 0 && got < uint64(now) {
			t.Fatalf("step %d (clock %d): seq %d after %d", i, now, got, last)
		}
		last = got
	}
	cc := schemas.ConfigChanged{ConfigVersion: "v", Ledger: []byte("{}")}
	legacy := len(domain)
	for _, f := range []string{"v", "", "", "", "{}", "", "", ""} {
		legacy += 8 + len(f)
	}
	if n := len(Message(&cc)); n != legacy {
		t.Fatalf("message without a sequence: %d bytes, want the pre-sequence %d", n, legacy)
	}
	cc.Seq = 1
	if n := len(Message(&cc)); n != legacy+16 {
		t.Fatalf("message with a sequence: %d bytes, want %d", n, legacy+16)
	}
}
