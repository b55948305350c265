package dev

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// Explainer returns the gateway's explainer of requests (GET
// /v1/sluice/requests/{id}) over the ledger's log on brokers: a request of
// the last 24 hours, searched in the partitions of the given scopes. It
// lives here because the gateway does not import the ledger service.
func Explainer(brokers []string, names bus.Names) gateway.Explainer {
	return func(ctx context.Context, id string, scopes []string) (*ledger.Explanation, error) {
		x, err := ledgerd.Explain(ctx, ledgerd.ExplainOptions{Brokers: brokers, Topics: names, RequestID: id,
			Partition: -1, Scopes: scopes, FromMs: time.Now().Add(-24 * time.Hour).UnixMilli()})
		if errors.Is(err, ledgerd.ErrRequestNotFound) {
			return nil, gateway.ErrNoRequest
		}
		return x, err
	}
}
