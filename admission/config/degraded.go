package config

import (
	"slices"
	"strings"
)

// Degraded configures the gateway's degraded mode (docs/gateway.md,
// "Degraded mode"): while no ledger answers, a request is admitted locally
// within Share ÷ (live gateways) of the capacity the ledger last reported,
// for at most MaxMs of a scope's silence, and charged by the ledger when it
// is back. The zero value is the default: on, share 0.5, 30 s, not batch.
type Degraded struct {
	// Enabled turns the mode on (default true; false fails closed, 503
	// ledger_unavailable, as before).
	Enabled *bool `yaml:"enabled"`
	// Share of the last known capacity all gateways together may admit
	// locally, (0, 1], default 0.5: with it, a gateway the ledger had not
	// yet counted alive still keeps the sum within the capacity.
	Share float64 `yaml:"share"`
	// MaxMs is the longest a scope's silence is admitted locally, from the
	// first request the ledger left unanswered (default 30 000, at most
	// 300 000); later requests get 503 until a ledger answers.
	MaxMs int64 `yaml:"max_ms"`
	// ExcludeClasses are the traffic classes never admitted locally
	// (default [batch] when the ledger has that class: batch can wait for
	// the ledger; [] admits every class).
	ExcludeClasses []string `yaml:"exclude_classes"`
	// Gateways is the least number of gateways the share is divided by
	// (default 0: the count the ledger last saw alive, at least 1). Set it
	// to the largest replica count (an HPA's maxReplicas) to stay safe
	// while gateways start during an outage.
	Gateways int `yaml:"gateways"`

	excluded map[string]bool
}

// Defaults and bounds of Degraded.
const (
	DegradedShareDefault = 0.5
	DegradedMaxMsDefault = 30_000
	DegradedMaxMsMax     = 300_000
	degradedGatewaysMax  = 10_000
)

// On reports whether degraded mode is on.
func (d *Degraded) On() bool { return d.Enabled == nil || *d.Enabled }

// Admits reports whether class may be admitted in degraded mode.
func (d *Degraded) Admits(class string) bool { return d.On() && !d.excluded[class] }

// finish fills the defaults and adds every problem; classes are the ledger
// document's (nil when it did not load).
func (d *Degraded) finish(classes map[string]bool, add func(string, string, ...any)) {
	if d.Share == 0 {
		d.Share = DegradedShareDefault
	}
	if d.Share < 0 || d.Share > 1 {
		add("degraded.share", "%g out of (0, 1]", d.Share)
	}
	if d.MaxMs == 0 {
		d.MaxMs = DegradedMaxMsDefault
	}
	if d.MaxMs < 0 || d.MaxMs > DegradedMaxMsMax {
		add("degraded.max_ms", "%d out of [1, %d]", d.MaxMs, int64(DegradedMaxMsMax))
	}
	if d.Gateways < 0 || d.Gateways > degradedGatewaysMax {
		add("degraded.gateways", "%d out of [0, %d]", d.Gateways, degradedGatewaysMax)
	}
	d.excluded = map[string]bool{}
	if d.ExcludeClasses == nil {
		if classes["batch"] {
			d.excluded["batch"] = true
		}
		return
	}
	for _, cl := range d.ExcludeClasses {
		if classes != nil && !classes[cl] {
			names := make([]string, 0, len(classes))
			for n := range classes {
				names = append(names, n)
			}
			slices.Sort(names)
			add("degraded.exclude_classes", "%q is not a class of the ledger document (%s)", cl, strings.Join(names, ", "))
		}
		d.excluded[cl] = true
	}
}
