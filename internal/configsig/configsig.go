// Package configsig signs and verifies ConfigChanged events (issue 19, item
// 4): a ConfigChanged reconfigures every ledger partition, and every
// principal that can write sluice.requests (every gateway) can append one.
// The admin writer signs each change with an Ed25519 private key; ledgers
// hold only the public key and refuse a ConfigChanged without a valid
// signature. A gateway that is not the admin writer holds no private key,
// so it cannot forge a change however it writes to the topic.
//
// Ed25519 rather than an HMAC: with an HMAC every verifier holds the key
// that makes valid signatures, so a ledger host (or anyone who reads its
// environment) could forge one. Ed25519 signatures are deterministic
// (RFC 8032), and verification is pure computation over the record's
// bytes, so a replay of the log refuses exactly what the live ledger
// refused.
//
// Key files are PEM: the private key as PKCS#8 ("PRIVATE KEY", what
// `openssl genpkey -algorithm ed25519` writes), public keys as PKIX
// ("PUBLIC KEY", `openssl pkey -pubout`). A public key file may hold several
// keys, so that a key can be rotated: publish the new public key to every
// ledger first, then switch the writer's private key.
package configsig

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// Environment variables naming the key files (each is a file path).
const (
	// EnvSigningKey is the admin writer's private key. A process that
	// holds it signs every ConfigChanged it writes, and also verifies
	// with its public half.
	EnvSigningKey = "SLUICE_ADMIN_SIGNING_KEY"
	// EnvPublicKey holds the public key(s) every ConfigChanged must be
	// signed by. Set on ledgers; on a gateway it means "this deployment
	// signs its config", and a gateway without the signing key then
	// serves no admin writes.
	EnvPublicKey = "SLUICE_ADMIN_PUBLIC_KEY"
)

// domain separates these signatures from any other use of the same key.
const domain = "sluice ConfigChanged v1\x00"

// Errors of Verify. Each says why a change was refused.
var (
	ErrUnsigned     = errors.New("ConfigChanged is not signed")
	ErrUnknownKey   = errors.New("ConfigChanged is signed by a key this ledger does not trust")
	ErrBadSignature = errors.New("ConfigChanged signature does not verify (forged or altered)")
	// ErrNotAdminWriter is what a process that must sign but holds no
	// signing key returns instead of writing a change the ledgers would
	// refuse.
	ErrNotAdminWriter = errors.New("this process does not hold the admin signing key (" + EnvSigningKey + "): config changes go through the admin writer")
)

// Message is the byte string a signature covers: every field of cc but
// the signature's own, each length-prefixed, after a domain string. It
// does not depend on the wire encoding, so a record re-serialised (a
// space in its JSON) keeps a valid signature, and a field moved from one
// to another does not. Seq is appended only when it is set, so that
// changes signed before it existed still verify.
func Message(cc *schemas.ConfigChanged) []byte {
	fields := [...][]byte{[]byte(cc.ConfigVersion), []byte(cc.Source), []byte(cc.Actor), []byte(cc.Reason),
		cc.Ledger, []byte(cc.Change), cc.Admission, []byte(cc.KeyID)}
	n := len(domain) + 16
	for _, f := range fields {
		n += 8 + len(f)
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	if cc.Seq != 0 {
		b = binary.BigEndian.AppendUint64(b, 8)
		b = binary.BigEndian.AppendUint64(b, cc.Seq)
	}
	return b
}

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// Signer signs ConfigChanged events. The zero value is not usable.
type Signer struct {
	priv ed25519.PrivateKey
	id   string
	last atomic.Uint64 // the last Seq NextSeq handed out
}

// Generate makes a fresh key pair (sluice dev's ephemeral one, `sluice
// admin keygen`).
func Generate() (*Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("configsig: generate key: %w", err)
	}
	return newSigner(priv), nil
}

func newSigner(priv ed25519.PrivateKey) *Signer {
	return &Signer{priv: priv, id: KeyID(priv.Public().(ed25519.PublicKey))}
}

// KeyID names the signer's public key.
func (s *Signer) KeyID() string { return s.id }

// NextSeq returns a sequence number above every one this signer handed
// out before and at least nowNs: the wall clock orders the changes of
// successive writer processes (a restarted admin writer, a new replica),
// the bump orders two changes in one nanosecond or across a clock step
// backwards within one process.
func (s *Signer) NextSeq(nowNs int64) uint64 {
	for {
		last := s.last.Load()
		next := max(uint64(max(nowNs, 0)), last+1)
		if s.last.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Sign sets cc.KeyID and cc.Signature. Call it last: a field changed
// afterwards invalidates the signature.
func (s *Signer) Sign(cc *schemas.ConfigChanged) {
	cc.KeyID = s.id
	cc.Signature = ed25519.Sign(s.priv, Message(cc))
}

// Verifier returns a verifier that trusts this signer's public key.
func (s *Signer) Verifier() *Verifier {
	pub := s.priv.Public().(ed25519.PublicKey)
	return &Verifier{keys: map[string]ed25519.PublicKey{s.id: pub}}
}

// PrivatePEM is the private key as a PKCS#8 PEM block.
func (s *Signer) PrivatePEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		panic(fmt.Sprintf("configsig: marshal ed25519 key: %v", err)) // cannot fail for ed25519
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// PublicPEM is the public key as a PKIX PEM block.
func (s *Signer) PublicPEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(s.priv.Public())
	if err != nil {
		panic(fmt.Sprintf("configsig: marshal ed25519 public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParseSigner reads a PKCS#8 PEM Ed25519 private key.
func ParseSigner(b []byte) (*Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("configsig: signing key: no PEM \"PRIVATE KEY\" block (want PKCS#8, e.g. `sluice admin keygen` or `openssl genpkey -algorithm ed25519`)")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("configsig: signing key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("configsig: signing key is a %T, not Ed25519", k)
	}
	return newSigner(priv), nil
}

// Verifier checks ConfigChanged signatures against a set of trusted
// public keys. A nil *Verifier is not usable; callers treat "no verifier"
// as "this deployment does not sign its config".
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// ParseVerifier reads one or more PKIX PEM Ed25519 public keys.
func ParseVerifier(b []byte) (*Verifier, error) {
	v := &Verifier{keys: map[string]ed25519.PublicKey{}}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("configsig: public key file: unexpected PEM block %q (want \"PUBLIC KEY\")", blk.Type)
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("configsig: public key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("configsig: public key is a %T, not Ed25519", k)
		}
		v.keys[KeyID(pub)] = pub
	}
	if len(v.keys) == 0 {
		return nil, errors.New("configsig: public key file holds no PEM \"PUBLIC KEY\" block")
	}
	return v, nil
}

// KeyIDs lists the trusted keys, sorted (for the start-up log line).
func (v *Verifier) KeyIDs() []string {
	return slices.Sorted(maps.Keys(v.keys))
}

// Verify reports why cc is not validly signed by a trusted key, or nil.
// It is pure: the same record gives the same answer everywhere.
func (v *Verifier) Verify(cc *schemas.ConfigChanged) error {
	if len(cc.Signature) == 0 {
		return ErrUnsigned
	}
	pub, ok := v.keys[cc.KeyID]
	if !ok {
		return fmt.Errorf("%w (key_id %q)", ErrUnknownKey, cc.KeyID)
	}
	if !ed25519.Verify(pub, Message(cc), cc.Signature) {
		return ErrBadSignature
	}
	return nil
}

// Keys is what one process holds. Both nil: the deployment does not sign
// its config (every ConfigChanged is accepted, as before issue 19).
type Keys struct {
	Signer   *Signer   // the admin writer's private key, or nil
	Verifier *Verifier // the keys a ConfigChanged must be signed by, or nil
}

// Enforced reports whether this process refuses unsigned changes.
func (k Keys) Enforced() bool { return k.Verifier != nil }

// process holds this process's keys. They are process-wide on purpose,
// like the Kafka credentials (bus.SecurityFromEnv): every path that
// decodes a sluice.requests record — the live ledger, catch-up, replay,
// what-if, explain, history — must agree on which ConfigChanged records
// are in force, or a replay diverges from the live run.
var process atomic.Pointer[Keys]

// SetProcess installs k as this process's keys.
func SetProcess(k Keys) { process.Store(&k) }

// Process returns this process's keys (zero Keys if none were set).
func Process() Keys {
	if k := process.Load(); k != nil {
		return *k
	}
	return Keys{}
}

// FromEnv loads the keys named by EnvSigningKey and EnvPublicKey. With a
// signing key and no public key file the process verifies with the
// signing key's public half; with both, the public file is what it
// trusts (it must include the signer's key for the process to accept
// its own changes).
func FromEnv(getenv func(string) string) (Keys, error) {
	var k Keys
	if p := strings.TrimSpace(getenv(EnvSigningKey)); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return Keys{}, fmt.Errorf("%s: %w", EnvSigningKey, err)
		}
		if k.Signer, err = ParseSigner(b); err != nil {
			return Keys{}, fmt.Errorf("%s=%s: %w", EnvSigningKey, p, err)
		}
		k.Verifier = k.Signer.Verifier()
	}
	if p := strings.TrimSpace(getenv(EnvPublicKey)); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return Keys{}, fmt.Errorf("%s: %w", EnvPublicKey, err)
		}
		if k.Verifier, err = ParseVerifier(b); err != nil {
			return Keys{}, fmt.Errorf("%s=%s: %w", EnvPublicKey, p, err)
		}
	}
	return k, nil
}

// SignForWrite signs cc with the process's key if it holds one, after
// giving it the next sequence number (cc.Seq; the ledgers refuse a signed
// change older than the one in force). A process that enforces
// signatures but holds no signing key gets ErrNotAdminWriter: what it
// would write, the ledgers refuse.
func SignForWrite(cc *schemas.ConfigChanged) error {
	k := Process()
	switch {
	case k.Signer != nil:
		cc.Seq = k.Signer.NextSeq(time.Now().UnixNano())
		k.Signer.Sign(cc)
	case k.Enforced():
		return ErrNotAdminWriter
	}
	return nil
}
