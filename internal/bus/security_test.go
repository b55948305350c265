package bus

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const secret = "hunter2-do-not-print"

// TestSecurityOpts: each setting is accepted or refused with every problem
// named; the password is in no error.
func TestSecurityOpts(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	garbage := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		s     Security
		nOpts int
		errs  []string // each must appear; none means valid
	}{
		{"zero is plaintext", Security{}, 0, nil},
		{"plain", Security{Mechanism: "PLAIN", User: "gw", Password: secret}, 1, nil},
		{"scram-256 any case", Security{Mechanism: "scram-sha-256", User: "gw", Password: secret}, 1, nil},
		{"scram-512 from a file, with tls", Security{Mechanism: "SCRAM-SHA-512", User: "gw", PasswordFile: pwFile, TLS: true}, 2, nil},
		{"tls alone", Security{TLS: true}, 1, nil},
		{"unknown mechanism", Security{Mechanism: "GSSAPI", User: "gw", Password: secret}, 0,
			[]string{`unknown mechanism "GSSAPI" (want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)`}},
		{"mechanism without credentials", Security{Mechanism: "PLAIN"}, 0,
			[]string{"sasl user: empty", "sasl password: empty"}},
		{"credentials without mechanism", Security{User: "gw", Password: secret}, 0,
			[]string{"no mechanism (want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"}},
		{"password twice", Security{Mechanism: "PLAIN", User: "gw", Password: secret, PasswordFile: pwFile}, 0,
			[]string{"either the password or the password file"}},
		{"missing password file", Security{Mechanism: "PLAIN", User: "gw", PasswordFile: filepath.Join(dir, "nope")}, 0,
			[]string{"sasl password file", "nope"}},
		{"every tls problem at once", Security{CAFile: garbage, CertFile: "c.pem", Mechanism: "KERBEROS", Password: secret}, 0,
			[]string{"holds no PEM certificate", "both the certificate and the key", `unknown mechanism "KERBEROS"`, "sasl user: empty"}},
		{"missing ca", Security{TLS: true, CAFile: filepath.Join(dir, "absent.pem")}, 0, []string{"tls ca", "absent.pem"}},
	}
	for _, c := range cases {
		opts, err := c.s.Opts()
		if len(c.errs) == 0 {
			if err != nil || len(opts) != c.nOpts {
				t.Errorf("%s: %d opts, err %v; want %d opts", c.name, len(opts), err, c.nOpts)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.errs {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
			}
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the password is in the error: %v", c.name, err)
		}
	}
}

// TestSecurityRedacted: no way of printing a Security shows the password.
func TestSecurityRedacted(t *testing.T) {
	s := Security{Mechanism: "PLAIN", User: "gw", Password: secret, TLS: true}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, s); strings.Contains(out, secret) || !strings.Contains(out, "redacted") {
			t.Errorf("%s prints %q", f, out)
		}
	}
}

// TestSecurityFromEnv reads every variable; a bad boolean is an error
// naming the variable.
func TestSecurityFromEnv(t *testing.T) {
	env := map[string]string{
		EnvSASLMechanism: "SCRAM-SHA-256", EnvSASLUser: "ledger", EnvSASLPassword: secret, EnvSASLPasswordFile: "",
		EnvTLS: "true", EnvTLSCA: "/ca.pem", EnvTLSCert: "/c.pem", EnvTLSKey: "/k.pem", EnvTLSServerName: "kafka.internal",
		EnvTLSInsecure: "false",
	}
	s, err := SecurityFromEnv(func(k string) string { return env[k] })
	want := Security{Mechanism: "SCRAM-SHA-256", User: "ledger", Password: secret, TLS: true, CAFile: "/ca.pem",
		CertFile: "/c.pem", KeyFile: "/k.pem", ServerName: "kafka.internal"}
	if err != nil || s != want {
		t.Fatalf("got %#v, %v; want %#v", s, err, want)
	}
	env[EnvTLS] = "yes please"
	if _, err := SecurityFromEnv(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), EnvTLS) {
		t.Fatalf("bad boolean: %v", err)
	}
}

// TestSASLAgainstKfake: the options authenticate for real (PLAIN and
// SCRAM on an in-process cluster that requires SASL), and wrong
// credentials fail without the password in the error.
func TestSASLAgainstKfake(t *testing.T) {
	for _, mech := range Mechanisms {
		t.Run(mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "admin", secret))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, pass := range []string{secret, "wrong"} {
				opts, err := Security{Mechanism: mech, User: "admin", Password: pass}.Opts()
				if err != nil {
					t.Fatal(err)
				}
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				err = Ping(context.Background(), cl, 2*time.Second)
				cl.Close()
				if ok := err == nil; ok != (pass == secret) {
					t.Errorf("password %s: ping err %v", map[bool]string{true: "right", false: "wrong"}[pass == secret], err)
				}
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("the password is in the error: %v", err)
				}
			}
		})
	}
}
