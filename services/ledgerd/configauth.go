package ledgerd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/ledger"

	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/schemas"
)

// ErrConfigRefused wraps why a ConfigChanged record was not applied: the
// process verifies config signatures (configsig.Process().Verifier) and
// the record carries no valid one. decodeInput then hands the ledger the
// same no-op tick as for an undecodable record, so the config in force
// stays, and a replay — which decodes through the same function with the
// same keys — refuses the same records.
var ErrConfigRefused = errors.New("ConfigChanged refused")

// authInput checks a decoded input: every ConfigChanged must be signed by
// a trusted key when this process verifies signatures. A nil error for
// every other event, and for every event when nothing is verified.
func authInput(ev *schemas.Event) error {
	if ev.Type != schemas.TypeConfigChanged || ev.ConfigChanged == nil {
		return nil
	}
	v := configsig.Process().Verifier
	if v == nil {
		return nil
	}
	if err := v.Verify(ev.ConfigChanged); err != nil {
		return fmt.Errorf("%w (config_version %q, source %q, actor %q): %w", ErrConfigRefused,
			ev.ConfigChanged.ConfigVersion, ev.ConfigChanged.Source, ev.ConfigChanged.Actor, err)
	}
	return nil
}

// refusalReason is the metric label of a refused ConfigChanged.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, configsig.ErrUnsigned):
		return "unsigned"
	case errors.Is(err, configsig.ErrUnknownKey):
		return "unknown_key"
	default:
		return "bad_signature"
	}
}

// badInput counts and logs an input record that the live loop applies as a
// no-op: undecodable, or a ConfigChanged refused (its own metric and an
// error-level line, since someone who can write the requests topic tried to
// reconfigure the ledger).
func (s *Service) badInput(p int32, offset int64, err error) {
	if errors.Is(err, ErrConfigRefused) {
		s.m.configRefused.WithLabelValues(refusalReason(err)).Inc()
		s.log.Error("ConfigChanged refused: not applied, the config in force stays", "partition", p, "offset", offset, "err", err)
		return
	}
	s.m.invalid.Inc()
	s.log.Warn("undecodable request record skipped", "partition", p, "offset", offset, "err", err)
}

// configApplied logs a ConfigChanged that the ledger itself refused after
// it passed the signature check: a document that does not validate, or a
// signed change older than the one in force (ledger.ErrConfigRollback: an
// old change re-appended). Either way the config in force stays; the
// metric counts them beside the signature refusals.
func (s *Service) configApplied(p int32, offset int64, configErr string) {
	if configErr == "" {
		return
	}
	reason := "invalid"
	if strings.Contains(configErr, ledger.ErrConfigRollback.Error()) {
		reason = "rollback"
	}
	s.m.configRefused.WithLabelValues(reason).Inc()
	s.log.Error("ConfigChanged refused by the ledger: not applied, the config in force stays", "partition", p, "offset", offset, "reason", reason, "err", configErr)
}
