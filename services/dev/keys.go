package dev

import (
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/internal/configsig"
)

var keysMu sync.Mutex

// ensureKeys gives the process an ephemeral config-signing key pair unless
// it has keys already (SLUICE_ADMIN_SIGNING_KEY / SLUICE_ADMIN_PUBLIC_KEY):
// the embedded stack then refuses an unsigned or forged ConfigChanged like
// a production ledger does, with zero setup. The pair lives as long as the
// process; every stack the process starts shares it (the keys are
// process-wide, configsig.Process).
func ensureKeys() error {
	keysMu.Lock()
	defer keysMu.Unlock()
	if k := configsig.Process(); k.Signer != nil || k.Verifier != nil {
		return nil
	}
	s, err := configsig.Generate()
	if err != nil {
		return fmt.Errorf("dev: ephemeral admin signing key: %w", err)
	}
	configsig.SetProcess(configsig.Keys{Signer: s, Verifier: s.Verifier()})
	return nil
}
