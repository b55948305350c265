package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/schemas"
)

// Entitlements (config.Entitlement): X-Sluice-Class and X-Sluice-Priority
// choose within what the key, its team and its tenant are entitled to; a
// request beyond it is refused, not clamped, so the caller learns that it
// asked for more than it may have. The ledger checks the same rule
// (ledger/entitle.go; the ledger document carries the entitlements,
// config.Config.LedgerJSON), so a request event that did not come through
// a gateway cannot promote itself either.

// entitled checks the request's class and priority against id's
// entitlements: nil, or the 403 naming the entitlement it broke.
func entitled(id *config.Identity, a admission) *apierr.Error {
	for _, h := range id.Entitlements {
		if len(h.AllowedClasses) > 0 && !slices.Contains(h.AllowedClasses, a.Class) {
			return notEntitled(id, apierr.CodeClassNotEntitled, HeaderClass,
				fmt.Sprintf("class %q is not among the classes %s may use (allowed_classes: %s)", a.Class, h.Name(), strings.Join(h.AllowedClasses, ", ")))
		}
		if h.MaxPriority != nil && a.Priority > *h.MaxPriority {
			return notEntitled(id, apierr.CodePriorityNotEntitled, HeaderPriority,
				fmt.Sprintf("priority %d is above the max_priority %d of %s", a.Priority, *h.MaxPriority, h.Name()))
		}
	}
	return nil
}

// modelAllowed checks model against id's model allowlists.
func modelAllowed(id *config.Identity, model string) *apierr.Error {
	for _, h := range id.Entitlements {
		if len(h.AllowedModels) > 0 && !slices.Contains(h.AllowedModels, model) {
			e := notEntitled(id, apierr.CodeModelNotAllowed, "model",
				fmt.Sprintf("model %q is not among the models %s may call (allowed_models: %s)", model, h.Name(), strings.Join(h.AllowedModels, ", ")))
			return e
		}
	}
	return nil
}

// visibleModels is the routed models id may call (GET /v1/models).
func visibleModels(cfg *config.Config, id *config.Identity) []string {
	var out []string
	for _, m := range cfg.Models() {
		if modelAllowed(id, m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func notEntitled(id *config.Identity, code, param, msg string) *apierr.Error {
	e := apierr.New(http.StatusForbidden, code, msg+"; ask your Sluice administrator to change the entitlement")
	e.Param = param
	e.Sluice.Tenant, e.Sluice.KeyID, e.Sluice.GatewayDecision = id.Tenant, id.KeyID, schemas.GDRejectedPolicy
	return e
}

// expired reports whether id's key has expired at now.
func expired(id *config.Identity, now time.Time) bool {
	return id.ExpiresAtMs > 0 && now.UnixMilli() >= id.ExpiresAtMs
}
