package admin

import (
	"net/http"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/internal/configsig"
)

// writerCheck refuses an admin write on a gateway that is not the admin
// writer: the deployment verifies config signatures (the process has
// SLUICE_ADMIN_PUBLIC_KEY) and this process holds no signing key
// (SLUICE_ADMIN_SIGNING_KEY). Its ConfigChanged records would be refused
// by every ledger, and its admin-topic state — which every gateway
// applies — would move the admission config away from the ledger's. So it
// writes nothing and says where to go. Reads are served everywhere.
func writerCheck() error {
	k := configsig.Process()
	if !k.Enforced() || k.Signer != nil {
		return nil
	}
	return apierr.New(http.StatusForbidden, apierr.CodeNotAdminWriter,
		"this gateway is not the admin writer: the deployment signs config changes ("+configsig.EnvPublicKey+
			" is set) and this gateway holds no signing key ("+configsig.EnvSigningKey+"); send admin writes to the gateway that holds it")
}
