package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/estimate"
)

// Change is one value a patch changes in a gateway configuration.
type Change struct {
	Path string `json:"path"` // e.g. routes[gpt-4o-mini].p95_output_tokens
	Old  string `json:"old"`  // "" = not set before
	New  string `json:"new"`
}

func (c Change) String() string {
	old := c.Old
	if old == "" {
		old = "(unset)"
	}
	return c.Path + ": " + old + " → " + c.New
}

// ParsePatch decodes a patch written by `sluice report --patch` and checks
// it: source calibration, factors positive and within the bounds a report
// can produce.
func ParsePatch(b []byte) (Patch, error) {
	var p Patch
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("patch: %w", err)
	}
	var errs []error
	if p.Source != PatchSource {
		errs = append(errs, fmt.Errorf("patch: source is %q, want %q", p.Source, PatchSource))
	}
	for i, r := range p.Routes {
		if r.Route == "" || r.P95OutputTokens < 0 || (r.InputCorrection != 0 && (r.InputCorrection < 0.5 || r.InputCorrection > 2)) {
			errs = append(errs, fmt.Errorf("patch: routes[%d]: route %q, p95_output_tokens %d, input_correction %v out of range", i, r.Route, r.P95OutputTokens, r.InputCorrection))
		}
	}
	for i, bp := range p.Buckets {
		if bp.Scope == "" || bp.Dimension == "" || bp.CapacityFactor <= 0.5 || bp.CapacityFactor > 2 {
			errs = append(errs, fmt.Errorf("patch: buckets[%d]: scope %q dimension %q capacity_factor %v out of range", i, bp.Scope, bp.Dimension, bp.CapacityFactor))
		}
	}
	for i, c := range p.Classes {
		if c.Class == "" || c.MaxWaitFactor <= 0.5 || c.MaxWaitFactor > 2 {
			errs = append(errs, fmt.Errorf("patch: classes[%d]: class %q max_wait_factor %v out of range", i, c.Class, c.MaxWaitFactor))
		}
	}
	return p, errors.Join(errs...)
}

// ApplyPatch applies p to a gateway configuration (YAML, comments kept) and
// returns the new document, what changed, and what the patch holds that the
// configuration cannot take (reported, not applied).
func ApplyPatch(doc []byte, p Patch) ([]byte, []Change, []string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, nil, nil, fmt.Errorf("gateway config: %w", err)
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, nil, nil, errors.New("gateway config: not a YAML mapping")
	}
	top := root.Content[0]
	var pa patcher
	if err := pa.routes(get(top, "routes"), p.Routes); err != nil {
		return nil, nil, nil, err
	}
	ledger := get(top, "ledger")
	if err := pa.buckets(get(ledger, "scopes"), p.Buckets); err != nil {
		return nil, nil, nil, err
	}
	pa.classes(get(ledger, "classes"), p.Classes)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, nil, nil, err
	}
	_ = enc.Close()
	return out.Bytes(), pa.changes, pa.skipped, nil
}

// patcher applies a patch's parts to the YAML tree, collecting what it
// changed and what it could not apply.
type patcher struct {
	changes []Change
	skipped []string
}

// routes applies the route patches: p95 output tokens and input
// correction.
func (pa *patcher) routes(routes *yaml.Node, rps []RoutePatch) error {
	for _, rp := range rps {
		// Events name a route by its model profile; the file keys routes by
		// model and may give the profile separately.
		r := findItem(routes, "model", rp.Route)
		if r == nil {
			r = findItem(routes, "profile", rp.Route)
		}
		if r == nil {
			pa.skipped = append(pa.skipped, fmt.Sprintf("route %s: not in the configuration", rp.Route))
			continue
		}
		if rp.P95OutputTokens > 0 {
			if c, ok := setInt(r, "p95_output_tokens", rp.P95OutputTokens); ok {
				c.Path = "routes[" + rp.Route + "].p95_output_tokens"
				pa.changes = append(pa.changes, c)
			}
		}
		if rp.InputCorrection != 0 {
			// The report measured estimates that already carry the route's
			// correction, so its factor compounds onto it, within the
			// estimator's bounds.
			old := 1.0
			if v := scalar(r, "input_correction"); v != "" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("route %s: input_correction %q: %w", rp.Route, v, err)
				}
				if f != 0 {
					old = f
				}
			}
			nv := estimate.ClampInputCorrection(math.Round(old*rp.InputCorrection*1000) / 1000)
			if c, ok := setScalar(r, "input_correction", strconv.FormatFloat(nv, 'f', -1, 64), "!!float"); ok {
				c.Path = "routes[" + rp.Route + "].input_correction"
				pa.changes = append(pa.changes, c)
			}
		}
	}
	return nil
}

// buckets scales the capacity of the patched buckets.
func (pa *patcher) buckets(scopes *yaml.Node, bps []BucketPatch) error {
	for _, bp := range bps {
		sc := findItem(scopes, "name", bp.Scope)
		if sc == nil {
			pa.skipped = append(pa.skipped, fmt.Sprintf("scope %s: not in the ledger configuration", bp.Scope))
			continue
		}
		n := 0
		buckets := get(sc, "buckets")
		for i, b := range items(buckets) {
			if scalar(b, "dimension") != bp.Dimension || (bp.Bucket != "" && scalar(b, "level")+":"+scalar(b, "id") != bp.Bucket) {
				continue
			}
			old, err := strconv.ParseInt(scalar(b, "capacity"), 10, 64)
			if err != nil {
				return fmt.Errorf("scope %s bucket %d: capacity %q: %w", bp.Scope, i, scalar(b, "capacity"), err)
			}
			nv := max(1, int64(math.Round(float64(old)*bp.CapacityFactor)))
			if c, ok := setInt(b, "capacity", nv); ok {
				c.Path = fmt.Sprintf("ledger.scopes[%s].buckets[%s:%s %s].capacity", bp.Scope, scalar(b, "level"), scalar(b, "id"), bp.Dimension)
				pa.changes = append(pa.changes, c)
			}
			n++
		}
		if n == 0 {
			pa.skipped = append(pa.skipped, fmt.Sprintf("scope %s: no %s bucket", bp.Scope, bp.Dimension))
		}
	}
	return nil
}

// classes raises the classes' max waits, never past their deadline.
func (pa *patcher) classes(classes *yaml.Node, cps []ClassPatch) {
	for _, cp := range cps {
		c := findItem(classes, "name", cp.Class)
		if c == nil {
			pa.skipped = append(pa.skipped, fmt.Sprintf("class %s: not in the ledger configuration", cp.Class))
			continue
		}
		old, err := strconv.ParseInt(scalar(c, "max_wait_ms"), 10, 64)
		if err != nil {
			pa.skipped = append(pa.skipped, fmt.Sprintf("class %s: no max_wait_ms to scale", cp.Class))
			continue
		}
		next := max(1, int64(math.Round(float64(old)*cp.MaxWaitFactor)))
		// A queued request must not wait past the class's deadline (the
		// configuration refuses max_wait_ms > deadline_ms): the raise
		// stops there, and never lowers a wait already at it.
		if d, err := strconv.ParseInt(scalar(c, "deadline_ms"), 10, 64); err == nil && d > 0 && next > d {
			next = max(old, d)
			pa.skipped = append(pa.skipped, fmt.Sprintf("class %s: max_wait_ms raise stopped at its deadline_ms %d", cp.Class, d))
		}
		if ch, ok := setInt(c, "max_wait_ms", next); ok {
			ch.Path = "ledger.classes[" + cp.Class + "].max_wait_ms"
			pa.changes = append(pa.changes, ch)
		}
	}
}

// get returns the value node of key in mapping m (nil if absent).
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(m *yaml.Node, key string) string {
	if v := get(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func items(seq *yaml.Node) []*yaml.Node {
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return nil
	}
	return seq.Content
}

func findItem(seq *yaml.Node, key, value string) *yaml.Node {
	for _, it := range items(seq) {
		if scalar(it, key) == value {
			return it
		}
	}
	return nil
}

// setInt sets key of mapping m to v, adding it when absent; ok is false
// when the value was already v.
func setInt(m *yaml.Node, key string, v int64) (Change, bool) {
	return setScalar(m, key, strconv.FormatInt(v, 10), "!!int")
}

// setScalar sets key of mapping m to the scalar nv tagged tag.
func setScalar(m *yaml.Node, key, nv, tag string) (Change, bool) {
	if cur := get(m, key); cur != nil {
		if cur.Value == nv {
			return Change{}, false
		}
		c := Change{Old: cur.Value, New: nv}
		cur.Value, cur.Tag, cur.Kind = nv, tag, yaml.ScalarNode
		return c, true
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: nv})
	return Change{New: nv}, true
}

// ApplyLedgerPatch applies the ledger part of p (buckets and classes; the
// routes live in the gateway file) to a ledger document (ledger.Config as
// JSON, as the admin API's state holds it) and returns the new document
// with the changes and what it could not take. Once the admin API has made
// a change, that document — not the file's ledger section — is what the
// gateways and ledgers run, so calibration must patch it.
func ApplyLedgerPatch(ledgerJSON []byte, p Patch) ([]byte, []Change, []string, error) {
	// JSON is YAML: wrap the document as a file's ledger section and reuse
	// ApplyPatch, so both paths scale limits by the same rules.
	doc := append(append([]byte(`{"ledger": `), ledgerJSON...), '}')
	lp := p
	lp.Routes = nil
	out, changes, skipped, err := ApplyPatch(doc, lp)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ledger document: %w", err)
	}
	var root struct {
		Ledger any `yaml:"ledger"`
	}
	if err := yaml.Unmarshal(out, &root); err != nil {
		return nil, nil, nil, fmt.Errorf("ledger document: %w", err)
	}
	b, err := json.Marshal(root.Ledger)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ledger document: %w", err)
	}
	return b, changes, skipped, nil
}
