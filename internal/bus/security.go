package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms a Sluice client can use.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the SASL mechanisms Security accepts.
var Mechanisms = []string{MechPlain, MechScramSHA256, MechScramSHA512}

// Environment variables read by SecurityFromEnv; the `sluice` flags of the
// same meaning default to them.
const (
	EnvSASLMechanism    = "SLUICE_KAFKA_SASL_MECHANISM"
	EnvSASLUser         = "SLUICE_KAFKA_SASL_USER"
	EnvSASLPassword     = "SLUICE_KAFKA_SASL_PASSWORD"
	EnvSASLPasswordFile = "SLUICE_KAFKA_SASL_PASSWORD_FILE"
	EnvTLS              = "SLUICE_KAFKA_TLS"
	EnvTLSCA            = "SLUICE_KAFKA_TLS_CA"
	EnvTLSCert          = "SLUICE_KAFKA_TLS_CERT"
	EnvTLSKey           = "SLUICE_KAFKA_TLS_KEY"
	EnvTLSServerName    = "SLUICE_KAFKA_TLS_SERVER_NAME"
	EnvTLSInsecure      = "SLUICE_KAFKA_TLS_INSECURE_SKIP_VERIFY"
)

// Security is how every Sluice Kafka client authenticates (SASL) and
// encrypts (TLS). The zero value is plaintext without authentication, the
// local test broker's setting.
//
// The password never appears in a log line or an error: String and
// GoString redact it, and no error built here quotes it.
type Security struct {
	// Mechanism is the SASL mechanism, one of Mechanisms (case-insensitive);
	// empty means no SASL.
	Mechanism string
	User      string
	// Password, or PasswordFile: a file holding it (trailing newline
	// trimmed), for secrets mounted as files. At most one of the two.
	Password     string
	PasswordFile string
	// TLS dials brokers with TLS. Any TLS file or setting below implies it.
	TLS bool
	// CAFile is a PEM bundle of the CAs that sign the brokers' certificates;
	// empty means the system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key
	// (mutual TLS); both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the brokers' certificates are checked
	// against (default: the host dialed).
	ServerName string
	// InsecureSkipVerify accepts any broker certificate. For tests only.
	InsecureSkipVerify bool
}

// SecurityFromEnv reads the SLUICE_KAFKA_SASL_* and SLUICE_KAFKA_TLS_*
// variables through getenv (os.Getenv in production).
func SecurityFromEnv(getenv func(string) string) (Security, error) {
	s := Security{
		Mechanism:    getenv(EnvSASLMechanism),
		User:         getenv(EnvSASLUser),
		Password:     getenv(EnvSASLPassword),
		PasswordFile: getenv(EnvSASLPasswordFile),
		CAFile:       getenv(EnvTLSCA),
		CertFile:     getenv(EnvTLSCert),
		KeyFile:      getenv(EnvTLSKey),
		ServerName:   getenv(EnvTLSServerName),
	}
	var errs []error
	parseBool := func(name string, dst *bool) {
		v := getenv(name)
		if v == "" {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a boolean (true or false)", name, v))
			return
		}
		*dst = b
	}
	parseBool(EnvTLS, &s.TLS)
	parseBool(EnvTLSInsecure, &s.InsecureSkipVerify)
	return s, errors.Join(errs...)
}

// tlsOn reports whether s dials with TLS.
func (s Security) tlsOn() bool {
	return s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.ServerName != "" || s.InsecureSkipVerify
}

// String describes s without its password.
func (s Security) String() string {
	var parts []string
	if s.Mechanism != "" {
		parts = append(parts, fmt.Sprintf("sasl=%s user=%q", s.Mechanism, s.User))
		if s.Password != "" {
			parts = append(parts, "password=<redacted>")
		}
		if s.PasswordFile != "" {
			parts = append(parts, "password_file="+s.PasswordFile)
		}
	}
	if s.tlsOn() {
		t := "tls=on"
		if s.CAFile != "" {
			t += " ca=" + s.CAFile
		}
		if s.CertFile != "" {
			t += " cert=" + s.CertFile
		}
		if s.InsecureSkipVerify {
			t += " insecure_skip_verify"
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, " ")
}

// GoString keeps %#v from printing the password.
func (s Security) GoString() string { return "bus.Security{" + s.String() + "}" }

// Opts checks s, reporting every problem, and returns the client options
// that implement it (none for the zero value). It reads the password,
// CA and certificate files.
func (s Security) Opts() ([]kgo.Opt, error) {
	var p secProblems
	pass, readFailed := s.password(&p)
	m := s.mechanism(&p, pass, readFailed)
	tc := s.tlsConfig(&p)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	var opts []kgo.Opt
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// secProblems gathers every problem of a Security, so that Opts reports
// them all at once with where each is, not only the first.
type secProblems struct{ errs []error }

func (p *secProblems) bad(loc, format string, a ...any) {
	p.errs = append(p.errs, fmt.Errorf("kafka security: %s: %s", loc, fmt.Sprintf(format, a...)))
}

// password is the SASL password, read from the password file if one is
// set; readFailed says the file could not be read (already reported, so
// an empty password is not reported twice).
func (s Security) password(p *secProblems) (pass string, readFailed bool) {
	pass = s.Password
	if s.PasswordFile != "" {
		if s.Password != "" {
			p.bad("sasl password", "set either the password or the password file, not both")
		}
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			// The path is in the error, never the content.
			p.bad("sasl password file", "%v", err)
			readFailed = true
		}
		pass = strings.TrimRight(string(b), "\r\n")
	}
	return pass, readFailed
}

// mechanism is the SASL mechanism s names, or nil for none, after checking
// that a mechanism comes with a user and a password and none without.
func (s Security) mechanism(p *secProblems, pass string, readFailed bool) sasl.Mechanism {
	mech := strings.ToUpper(strings.TrimSpace(s.Mechanism))
	var m sasl.Mechanism
	switch mech {
	case "":
		if s.User != "" || pass != "" {
			p.bad("sasl mechanism", "a SASL user or password is set but no mechanism (want one of %s)", strings.Join(Mechanisms, ", "))
		}
	case MechPlain:
		m = plain.Plain(func(context.Context) (plain.Auth, error) { return plain.Auth{User: s.User, Pass: pass}, nil })
	case MechScramSHA256:
		m = scram.Sha256(func(context.Context) (scram.Auth, error) { return scram.Auth{User: s.User, Pass: pass}, nil })
	case MechScramSHA512:
		m = scram.Sha512(func(context.Context) (scram.Auth, error) { return scram.Auth{User: s.User, Pass: pass}, nil })
	default:
		p.bad("sasl mechanism", "unknown mechanism %q (want one of %s)", s.Mechanism, strings.Join(Mechanisms, ", "))
	}
	if mech != "" {
		if s.User == "" {
			p.bad("sasl user", "empty (required with mechanism %s)", mech)
		}
		if pass == "" && !readFailed {
			p.bad("sasl password", "empty (required with mechanism %s)", mech)
		}
	}
	return m
}

// tlsConfig is the TLS configuration s asks for, with its CA and client
// certificate loaded, or nil when TLS is off.
func (s Security) tlsConfig(p *secProblems) *tls.Config {
	if !s.tlsOn() {
		return nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			p.bad("tls ca", "%v", err)
		} else {
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				p.bad("tls ca", "%s holds no PEM certificate", s.CAFile)
			}
		}
	}
	switch {
	case (s.CertFile == "") != (s.KeyFile == ""):
		p.bad("tls client certificate", "set both the certificate and the key file, or neither")
	case s.CertFile != "":
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			p.bad("tls client certificate", "%v", err)
		} else {
			tc.Certificates = []tls.Certificate{cert}
		}
	}
	return tc
}

var (
	secMu   sync.RWMutex
	secOpts []kgo.Opt
)

// Configure checks s and installs it for every client this process
// creates afterwards: NewClient and Opts add its options, and any client
// built with kgo.NewClient directly must append SecurityOpts(). A process
// calls it once at start, before its first client; without it, clients are
// plaintext.
func Configure(s Security) error {
	opts, err := s.Opts()
	if err != nil {
		return err
	}
	secMu.Lock()
	secOpts = opts
	secMu.Unlock()
	return nil
}

// SecurityOpts returns the options installed by Configure (nil when none
// are), for clients created with kgo.NewClient or
// kgo.NewGroupTransactSession directly.
func SecurityOpts() []kgo.Opt {
	secMu.RLock()
	defer secMu.RUnlock()
	return append([]kgo.Opt(nil), secOpts...)
}

// Opts returns the options every Sluice client starts with: the seed
// brokers and the installed security, followed by opts.
func Opts(brokers []string, opts ...kgo.Opt) []kgo.Opt {
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, SecurityOpts()...)
	all = append(all, kafkaLogOpts()...)
	return append(all, opts...)
}
