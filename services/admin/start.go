package admin

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
)

// Gateway is what Start binds: a gateway Server.
type Gateway interface {
	Target
	SetAdmin(http.Handler)
	// SetOperatorToken hands the gateway the operator token, which also
	// opens its /metrics on the API listener.
	SetOperatorToken(string)
	// AdminLoaded says the newest admin state is installed: the gateway's
	// /readyz waits for it.
	AdminLoaded()
}

// Running is a gateway's admin wiring.
type Running struct {
	Store   *KafkaStore
	Binding *Binding
}

// Close stops following the admin topic.
func (r *Running) Close() { r.Store.Close() }

// Start makes gw follow the admin topic — every gateway does, so that a
// change made on any gateway takes effect on all of them — and, when
// operatorToken is set, serves the admin API on it. file is the gateway's
// configuration as loaded from its file. It returns once the newest
// committed admin state is installed in gw. Where the deployment signs its
// config and this process holds no signing key, every admin write answers
// 403 not_admin_writer.
func Start(ctx context.Context, gw Gateway, file *config.Config, brokers []string, names bus.Names, operatorToken string, log *slog.Logger) (*Running, error) {
	b := NewBinding(gw, file, log)
	// A gateway that is not the admin writer (signing.go) follows the
	// topic read-only: it never writes there, not even the catch-up
	// marker, so its Kafka principal needs only Read on the admin topic
	// (docs/kafka-security.md).
	st, err := OpenKafka(ctx, KafkaConfig{Brokers: brokers, Names: names, Seed: Seed(file), Check: b.Check, OnApply: b.Apply, Log: log,
		ReadOnly: writerCheck() != nil})
	if err != nil {
		return nil, err
	}
	b.SetReseed(st.Reseed)
	if operatorToken != "" {
		h, err := NewHandler(st, operatorToken, log)
		if err != nil {
			st.Close()
			return nil, err
		}
		gw.SetAdmin(h)
		gw.SetOperatorToken(operatorToken)
	}
	gw.AdminLoaded()
	return &Running{Store: st, Binding: b}, nil
}
