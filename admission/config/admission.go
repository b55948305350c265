package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/internal/problems"
)

// WithAdmission returns the configuration of c's file with its tenants and
// its ledger section replaced: the admin API (services/admin) owns those
// once it has made a change, while providers, routes and the other settings
// stay the file's. The result is validated like a loaded file; c itself is
// unchanged. A Config not made by Load or LoadFile cannot be overlaid.
func (c *Config) WithAdmission(tenants []Tenant, ledgerJSON []byte) (*Config, error) {
	if c.raw == nil {
		return nil, errors.New("config: overlay needs a configuration loaded from a file")
	}
	// The file's positions do not apply to tenants and a ledger document
	// from the admin state, so the problems carry paths only.
	p := &problems.List{Subject: "config with the admin state"}
	var n Config
	root := p.Parse(c.raw)
	if root == nil {
		return nil, p.Err()
	}
	if err := p.Check(root, "", reflect.TypeOf(n), problems.TagYAML).Decode(&n); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	n.Tenants = make([]Tenant, len(tenants))
	for i, t := range tenants {
		t.Keys = append([]Key(nil), t.Keys...)
		n.Tenants[i] = t
	}
	// JSON is YAML: the ledger document becomes the ledger node as if the
	// file had it.
	var doc yaml.Node
	if err := yaml.Unmarshal(ledgerJSON, &doc); err != nil {
		return nil, fmt.Errorf("ledger document: %w", err)
	}
	n.Ledger = yaml.Node{}
	if len(doc.Content) > 0 {
		n.Ledger = *doc.Content[0]
	}
	n.finish(os.Getenv, p)
	for i := range p.Problems {
		p.Problems[i].Pos = problems.Pos{} // lines of the file or of a JSON text: neither is where these came from
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	n.raw = c.raw
	return &n, nil
}
