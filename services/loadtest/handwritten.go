package loadtest

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/services/sim"
)

// gatewayYAML makes the gateway config of a run for the simulator at a
// URL: generated from the scenario, or a hand-written file made to run
// against the simulator (HandwrittenConfigYAML).
type gatewayYAML func(simURL string) ([]byte, error)

// generatedConfig is the generated gateway config of sc.
func generatedConfig(sc *Scenario, keys Keys) gatewayYAML {
	return func(simURL string) ([]byte, error) { return GatewayConfigYAML(sc, simURL, keys) }
}

// handwrittenConfig reads a gateway config file for --config.
func handwrittenConfig(sc *Scenario, path string, keys Keys) (gatewayYAML, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return func(simURL string) ([]byte, error) {
		y, err := HandwrittenConfigYAML(sc, b, simURL, keys)
		if err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, err)
		}
		return y, nil
	}, nil
}

// HandwrittenConfigYAML turns a hand-written gateway config into one that
// runs the scenario against the simulator at simURL, keeping everything
// that decides admission (routes, classes, scopes, buckets, tenants'
// weights) as written:
//
//   - `${SIM_URL}` is replaced by simURL (as `sluice dev` does);
//   - every provider's base_url becomes the simulator's endpoint for the
//     provider's kind (sim.BasePath: openai and openai_compatible:
//     SIM/openai/v1, azure: SIM/azure, anthropic: SIM/anthropic/v1, gemini:
//     SIM/gemini/v1beta),
//     and its api_key_env is dropped (the simulator needs no credential);
//   - each scenario tenant gets a key of its own, in the config's tenant of
//     the same id when there is one (so its buckets and weight apply),
//     else in a new tenant of that id; the key's class is the tenant's
//     class in the scenario, which must be a class of the config. The
//     warm-up tenant gets a key in the default class.
//
// The scenario's model must be a route of the config. The result is
// validated as the gateway would.
func HandwrittenConfigYAML(sc *Scenario, file []byte, simURL string, keys Keys) ([]byte, error) {
	simURL = strings.TrimRight(simURL, "/")
	// Typed, so that values keep their types (a key hash of digits only is
	// not a number) and an unknown field is refused as the gateway would.
	var c config.Config
	dec := yaml.NewDecoder(strings.NewReader(strings.ReplaceAll(string(file), "${SIM_URL}", simURL)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	for i := range c.Providers {
		p := &c.Providers[i]
		path, ok := sim.BasePath(p.Kind)
		if !ok {
			return nil, fmt.Errorf("providers[%d].kind: %q has no simulator endpoint", i, p.Kind)
		}
		p.BaseURL, p.APIKeyEnv = simURL+path, ""
	}
	addKey := func(id, tenant, class string) {
		k := config.Key{ID: id + "-loadtest", SHA256: config.HashKey(keys[id]), Class: class}
		for i := range c.Tenants {
			if c.Tenants[i].ID == tenant {
				c.Tenants[i].Keys = append(c.Tenants[i].Keys, k)
				return
			}
		}
		c.Tenants = append(c.Tenants, config.Tenant{ID: tenant, Org: "loadtest", Keys: []config.Key{k}})
	}
	addKey(warmupTenant, warmupTenant, "")
	for _, t := range sc.Tenants {
		tenant := t.Tenant
		if tenant == "" { // a scenario built in Go, not parsed
			tenant = t.ID
		}
		addKey(t.ID, tenant, t.Class)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, err
	}
	lc, err := config.Load(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return nil, err
	}
	if lc.Route(sc.Model) == nil {
		return nil, fmt.Errorf("no route for the scenario's model %q (routes: %s)", sc.Model, strings.Join(lc.Models(), ", "))
	}
	for _, t := range sc.Tenants {
		if t.Model != "" && lc.Route(t.Model) == nil {
			return nil, fmt.Errorf("no route for tenant %s's model %q (routes: %s)", t.ID, t.Model, strings.Join(lc.Models(), ", "))
		}
	}
	return buf.Bytes(), nil
}
