// Package config is the gateway's typed configuration: providers and their
// scopes, routes from a public model name to upstream deployments, tenants
// and their API keys (stored as SHA-256 hashes only), and the ledger's quota
// document that the gateway publishes as a ConfigChanged event.
//
// Loading fills defaults and then validates, reporting every problem with
// its location, so a bad file is fixed in one pass.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/ledger"
)

// Provider kinds understood by the adapters.
const (
	KindOpenAI           = "openai"
	KindAzure            = "azure"
	KindAnthropic        = "anthropic"
	KindGemini           = "gemini"
	KindOpenAICompatible = "openai_compatible"
)

// Config is the gateway configuration file (YAML).
type Config struct {
	// Node names this gateway; decisions are routed back by it.
	Node string `yaml:"node"`
	// BodyLimitBytes caps request bodies (default 10 MiB).
	BodyLimitBytes int64 `yaml:"body_limit_bytes"`
	// LedgerTimeoutMs bounds the wait for the ledger's first answer before
	// failing closed (default 2000).
	LedgerTimeoutMs int64 `yaml:"ledger_timeout_ms"`
	// EmergencyCapPerSec admits this many requests per second locally when
	// the ledger is unavailable (default 0: fail closed).
	EmergencyCapPerSec int `yaml:"emergency_cap_per_sec"`

	Providers []Provider `yaml:"providers"`
	Routes    []Route    `yaml:"routes"`
	Tenants   []Tenant   `yaml:"tenants"`
	// Ledger is the ledger's quota document (ledger.Config), published as a
	// ConfigChanged event to every partition.
	Ledger yaml.Node `yaml:"ledger"`

	ledgerJSON []byte
	keys       map[string]*Identity // sha256 hex → identity
	routes     map[string]*Route
	providers  map[string]*Provider
}

// Provider is one upstream provider deployment and the quota scope it
// belongs to.
type Provider struct {
	Name  string `yaml:"name"`
	Kind  string `yaml:"kind"`  // openai, azure, anthropic, gemini, openai_compatible
	Scope string `yaml:"scope"` // provider scope: the ledger partition key
	// BaseURL up to and including the API version prefix, e.g.
	// https://api.openai.com/v1.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the credential; the
	// credential itself never appears in config, events, logs or errors.
	APIKeyEnv  string `yaml:"api_key_env"`
	APIVersion string `yaml:"api_version,omitempty"` // Azure
	Deployment string `yaml:"deployment,omitempty"`  // Azure deployment name

	apiKey string
}

// APIKey returns the provider credential read from the environment.
func (p *Provider) APIKey() string { return p.apiKey }

// Route maps a public model name to a provider and upstream model.
type Route struct {
	Model         string `yaml:"model"`
	Provider      string `yaml:"provider"`
	UpstreamModel string `yaml:"upstream_model"`
	Profile       string `yaml:"profile"` // model profile level of the bucket path
	// DefaultMaxOutputTokens is reserved when the request does not say
	// (default 4096).
	DefaultMaxOutputTokens int64 `yaml:"default_max_output_tokens"`
}

// Tenant is a customer of the gateway with its keys.
type Tenant struct {
	ID     string `yaml:"id"`
	Org    string `yaml:"org"`
	Paused bool   `yaml:"paused"`
	Keys   []Key  `yaml:"keys"`
}

// Key is one API key, known only by its SHA-256 hash.
type Key struct {
	ID       string `yaml:"id"`
	SHA256   string `yaml:"sha256"`
	Team     string `yaml:"team"`
	App      string `yaml:"app"`
	Class    string `yaml:"class"` // default traffic class
	Disabled bool   `yaml:"disabled"`
	Paused   bool   `yaml:"paused"`
}

// Identity is what an API key resolves to.
type Identity struct {
	Org, Tenant, Team, App, KeyID, Class string
	Disabled, Paused, TenantPaused       bool
}

// HashKey returns the hex SHA-256 of an API key, the only form in which keys
// are stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// LoadFile reads and validates a config file.
func LoadFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Load parses YAML, fills defaults and validates.
func Load(r io.Reader) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if err := c.finish(os.Getenv); err != nil {
		return nil, err
	}
	return &c, nil
}

// ValidationError lists every problem found, each with its location.
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string {
	return fmt.Sprintf("%d problem(s):\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// finish fills defaults, resolves references and validates.
func (c *Config) finish(getenv func(string) string) error {
	var probs []string
	add := func(format string, a ...any) { probs = append(probs, fmt.Sprintf(format, a...)) }
	if c.Node == "" {
		c.Node = "gw-1"
	}
	if c.BodyLimitBytes == 0 {
		c.BodyLimitBytes = 10 << 20
	}
	if c.BodyLimitBytes < 1024 {
		add("body_limit_bytes: %d is below the 1024-byte minimum", c.BodyLimitBytes)
	}
	if c.LedgerTimeoutMs == 0 {
		c.LedgerTimeoutMs = 2000
	}
	if c.LedgerTimeoutMs < 0 {
		add("ledger_timeout_ms: must be positive")
	}
	c.providers = map[string]*Provider{}
	for i := range c.Providers {
		p := &c.Providers[i]
		at := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			add("%s.name: required", at)
		} else if c.providers[p.Name] != nil {
			add("%s.name: duplicate provider %q", at, p.Name)
		}
		c.providers[p.Name] = p
		switch p.Kind {
		case KindOpenAI, KindAzure, KindAnthropic, KindGemini, KindOpenAICompatible:
		default:
			add("%s.kind: %q is not one of openai, azure, anthropic, gemini, openai_compatible", at, p.Kind)
		}
		if p.Scope == "" {
			add("%s.scope: required (the provider quota scope, e.g. openai:org-x/proj-y)", at)
		}
		if !strings.HasPrefix(p.BaseURL, "http://") && !strings.HasPrefix(p.BaseURL, "https://") {
			add("%s.base_url: %q must start with http:// or https://", at, p.BaseURL)
		}
		if p.Kind == KindAzure && (p.APIVersion == "" || p.Deployment == "") {
			add("%s: azure providers need api_version and deployment", at)
		}
		if p.APIKeyEnv != "" {
			p.apiKey = getenv(p.APIKeyEnv)
			if p.apiKey == "" {
				add("%s.api_key_env: environment variable %s is empty or unset", at, p.APIKeyEnv)
			}
		}
	}
	c.routes = map[string]*Route{}
	for i := range c.Routes {
		r := &c.Routes[i]
		at := fmt.Sprintf("routes[%d]", i)
		if r.Model == "" {
			add("%s.model: required", at)
		} else if c.routes[r.Model] != nil {
			add("%s.model: duplicate route for %q", at, r.Model)
		}
		c.routes[r.Model] = r
		if c.providers[r.Provider] == nil {
			add("%s.provider: unknown provider %q", at, r.Provider)
		}
		if r.UpstreamModel == "" {
			r.UpstreamModel = r.Model
		}
		if r.Profile == "" {
			r.Profile = r.Model
		}
		if r.DefaultMaxOutputTokens == 0 {
			r.DefaultMaxOutputTokens = 4096
		}
		if r.DefaultMaxOutputTokens < 0 {
			add("%s.default_max_output_tokens: must be positive", at)
		}
	}
	c.keys = map[string]*Identity{}
	tenants := map[string]bool{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		at := fmt.Sprintf("tenants[%d]", i)
		if t.ID == "" {
			add("%s.id: required", at)
		} else if tenants[t.ID] {
			add("%s.id: duplicate tenant %q", at, t.ID)
		}
		tenants[t.ID] = true
		for j := range t.Keys {
			k := &t.Keys[j]
			kat := fmt.Sprintf("%s.keys[%d]", at, j)
			if k.ID == "" {
				add("%s.id: required", kat)
			}
			k.SHA256 = strings.ToLower(k.SHA256)
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
				add("%s.sha256: must be 64 hex characters (the SHA-256 of the key; `sluice keys hash` prints it)", kat)
			} else if c.keys[k.SHA256] != nil {
				add("%s.sha256: the same key is configured twice", kat)
			}
			if k.Class == "" {
				k.Class = "interactive"
			}
			c.keys[k.SHA256] = &Identity{Org: t.Org, Tenant: t.ID, Team: k.Team, App: k.App, KeyID: k.ID, Class: k.Class,
				Disabled: k.Disabled, Paused: k.Paused, TenantPaused: t.Paused}
		}
	}
	if c.Ledger.Kind == 0 {
		add("ledger: required (the quota document; see deploy/examples/sluice.yaml)")
	} else {
		var doc any
		if err := c.Ledger.Decode(&doc); err != nil {
			add("ledger: %v", err)
		} else if b, err := json.Marshal(doc); err != nil {
			add("ledger: %v", err)
		} else if lc, err := ledger.ParseConfig(b); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if line = strings.TrimSpace(line); line != "" {
					add("ledger: %s", line)
				}
			}
		} else if c.ledgerJSON, err = json.Marshal(lc); err != nil {
			add("ledger: %v", err)
		}
	}
	if len(probs) > 0 {
		return &ValidationError{Problems: probs}
	}
	return nil
}

// LedgerJSON is the validated ledger document, defaults filled, as JSON.
func (c *Config) LedgerJSON() []byte { return c.ledgerJSON }

// Lookup returns the identity of a presented API key, or nil.
func (c *Config) Lookup(key string) *Identity { return c.keys[HashKey(key)] }

// Route returns the route of a public model name, or nil.
func (c *Config) Route(model string) *Route { return c.routes[model] }

// Provider returns a provider by name, or nil.
func (c *Config) Provider(name string) *Provider { return c.providers[name] }

// Models lists the public model names, sorted.
func (c *Config) Models() []string {
	out := make([]string, 0, len(c.routes))
	for m := range c.routes {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
