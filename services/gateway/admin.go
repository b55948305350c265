package gateway

import (
	"net/http"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
)

// SetAdmin mounts the admin API (services/admin.Handler) at /admin/v1/.
// Without it those paths answer 404: the admin API is off unless the
// gateway has an operator token.
func (s *Server) SetAdmin(h http.Handler) { s.admin.Store(&h) }

func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	h := s.admin.Load()
	if h == nil {
		httperr.Write(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound,
			"the admin API is off on this gateway: start it with an operator token (SLUICE_ADMIN_TOKEN or --admin-token-file)"), false)
		return
	}
	(*h).ServeHTTP(w, r)
}
