package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/httpmux"
	"github.com/sluice-dev/sluice/ledger"
)

// Bounds of an admin request.
const (
	bodyBytesMax  = 1 << 20
	reasonLenMax  = 500
	actorLenMax   = 64
	secretBytes   = 24 // 192 bits of randomness per key or token
	KeyPrefix     = "sk-sluice-"
	PartnerPrefix = "sluice-partner-"
)

// Route is one admin endpoint; Routes lists them all, and the served
// OpenAPI document is built from this table (openapi.go).
type Route struct {
	Method, Pattern string
	Summary         string
	// Response names the response's schema in the OpenAPI document; a
	// route with Change set takes a ChangeRequest body.
	Response string
	Change   bool
	Kind     OpKind // the change a Change route makes
	h        func(*Handler, http.ResponseWriter, *http.Request, Actor)
	public   bool // no token needed (the OpenAPI document)
}

func changeRoute(method, pattern string, kind OpKind, summary string) Route {
	return Route{Method: method, Pattern: pattern, Summary: summary, Response: "ChangeResponse", Change: true, Kind: kind, h: change(kind)}
}

// Routes is the admin API's route table.
func Routes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/admin/v1/openapi.json", Summary: "This OpenAPI document.", Response: "OpenAPI", h: (*Handler).openAPI, public: true},
		{Method: "GET", Pattern: "/admin/v1/tenants", Summary: "List the tenants the caller may see (a partner: its own).", Response: "TenantList", h: (*Handler).listTenants},
		changeRoute("POST", "/admin/v1/tenants", OpTenantCreate, "Create a tenant (id; org; partner, operator only; limits). A partner's tenant ids start with \"<partner>.\"."),
		{Method: "GET", Pattern: "/admin/v1/tenants/{tenant}", Summary: "A tenant with its teams, keys and limits (404 if the caller may not see it).", Response: "TenantResponse", h: (*Handler).getTenant},
		changeRoute("DELETE", "/admin/v1/tenants/{tenant}", OpTenantDelete, "Delete a tenant, its keys and its limits."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/pause", OpTenantPause, "Emergency pause: every key of the tenant gets 403 paused."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/resume", OpTenantResume, "Resume a paused tenant."),
		changeRoute("PUT", "/admin/v1/tenants/{tenant}/limits", OpTenantLimits, "Replace the tenant-level limits (a partner's within its allotment)."),
		changeRoute("PUT", "/admin/v1/tenants/{tenant}/entitlements", OpTenantEntitle, "Replace the tenant's entitlements (allowed_classes, max_priority, allowed_models; absent = no bound): what every key of the tenant may ask for."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/teams", OpTeamCreate, "Create a team (id) in the tenant."),
		changeRoute("DELETE", "/admin/v1/tenants/{tenant}/teams/{team}", OpTeamDelete, "Delete a team without live keys."),
		changeRoute("PUT", "/admin/v1/tenants/{tenant}/teams/{team}/limits", OpTeamLimits, "Replace the team-level limits."),
		changeRoute("PUT", "/admin/v1/tenants/{tenant}/teams/{team}/entitlements", OpTeamEntitle, "Replace the team's entitlements (allowed_classes, max_priority, allowed_models)."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/keys", OpKeyCreate, "Create an API key (id, team, app, class, priority, deadline_ms, allowed_classes, max_priority, allowed_models, expires_at); the response holds the key once."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/keys/{key}/rotate", OpKeyRotate, "Replace the key's secret; the old one stops working; the response holds the new one once."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/keys/{key}/revoke", OpKeyRevoke, "Revoke the key for good (401 api_key_disabled)."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/keys/{key}/pause", OpKeyPause, "Emergency pause of one key (403 paused)."),
		changeRoute("POST", "/admin/v1/tenants/{tenant}/keys/{key}/resume", OpKeyResume, "Resume a paused key."),
		changeRoute("PUT", "/admin/v1/tenants/{tenant}/keys/{key}/limits", OpKeyLimits, "Replace the key-level limits."),
		changeRoute("PUT", "/admin/v1/tenants/{tenant}/keys/{key}/entitlements", OpKeyEntitle, "Replace the key's entitlements and expiry (allowed_classes, max_priority, allowed_models, expires_at; absent = no bound, no expiry). An expired key gets 401 invalid_api_key."),
		{Method: "GET", Pattern: "/admin/v1/partners", Summary: "List the partners (operator only).", Response: "PartnerList", h: (*Handler).listPartners},
		changeRoute("POST", "/admin/v1/partners", OpPartnerCreate, "Create a partner (id, name, limits = its allotment); the response holds its token once (operator only)."),
		{Method: "GET", Pattern: "/admin/v1/partners/{partner}", Summary: "A partner, its allotment and its tenants (the operator, or the partner itself).", Response: "PartnerResponse", h: (*Handler).getPartner},
		changeRoute("PUT", "/admin/v1/partners/{partner}/allotment", OpPartnerAllot, "Replace a partner's allotment (limits; operator only)."),
		changeRoute("PUT", "/admin/v1/partners/{partner}/entitlements", OpPartnerEntitle, "Replace a partner's entitlements (allowed_classes, max_priority, allowed_models; operator only): they bound every request of its sub-tenants, whatever the partner grants them."),
		changeRoute("POST", "/admin/v1/partners/{partner}/rotate", OpPartnerRotate, "Replace a partner's token; the response holds the new one once (operator only)."),
	}
}

// Handler serves /admin/v1. The operator token is compared in constant
// time; a partner token is looked up by its SHA-256, as API keys are.
type Handler struct {
	store Store
	token string
	log   *slog.Logger
	mux   *http.ServeMux
}

// NewHandler serves the admin API over store. operatorToken must not be
// empty: without one the gateway does not mount the admin API at all.
func NewHandler(store Store, operatorToken string, log *slog.Logger) (*Handler, error) {
	if operatorToken == "" {
		return nil, errors.New("admin: an operator token is required")
	}
	if len(operatorToken) < 16 {
		return nil, errors.New("admin: the operator token must be at least 16 characters")
	}
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{store: store, token: operatorToken, log: log, mux: http.NewServeMux()}
	for _, rt := range Routes() {
		h.mux.HandleFunc(rt.Method+" "+rt.Pattern, h.wrap(rt))
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		if allow := httpmux.Allowed(h.mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeErr(w, apierr.New(http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed,
				fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))))
			return
		}
		writeErr(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound, fmt.Sprintf("no admin route for %s %s (GET /admin/v1/openapi.json lists them)", r.Method, r.URL.Path)))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) wrap(rt Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if rt.public {
			rt.h(h, w, r, Actor{})
			return
		}
		a, e := h.authenticate(r)
		if e != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			writeErr(w, e)
			return
		}
		rt.h(h, w, r, a)
	}
}

// authenticate resolves the bearer token to the operator or a partner.
func (h *Handler) authenticate(r *http.Request) (Actor, *apierr.Error) {
	tok, ok := httpmux.BearerToken(r.Header.Get("Authorization"))
	if !ok {
		return Actor{}, apierr.New(http.StatusUnauthorized, apierr.CodeMissingAdminToken, "no admin token: send Authorization: Bearer <operator or partner token>")
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(h.token)) == 1 {
		name := strings.TrimSpace(r.Header.Get("X-Sluice-Actor"))
		if len(name) > actorLenMax || validID("X-Sluice-Actor", name) != nil {
			name = ""
		}
		return Actor{Name: name}, nil
	}
	st := h.store.State()
	if p := st.PartnerByTokenHash(config.HashKey(tok)); p != nil {
		return Actor{Partner: p.ID}, nil
	}
	return Actor{}, apierr.New(http.StatusUnauthorized, apierr.CodeInvalidAdminToken, "invalid admin token")
}

// ChangeRequest is the body of every admin call that changes something.
// BaseVersion (the version the caller read) and Reason (for the audit
// trail) are required; the other fields are those of the call.
type ChangeRequest struct {
	BaseVersion *int64  `json:"base_version"`
	Reason      string  `json:"reason"`
	ID          string  `json:"id,omitempty"`
	Org         string  `json:"org,omitempty"`
	Partner     string  `json:"partner,omitempty"`
	Name        string  `json:"name,omitempty"`
	Team        string  `json:"team,omitempty"`
	App         string  `json:"app,omitempty"`
	Class       string  `json:"class,omitempty"`
	Priority    int32   `json:"priority,omitempty"`
	DeadlineMs  int64   `json:"deadline_ms,omitempty"`
	Limits      []Limit `json:"limits,omitempty"`
	// The entitlement of key create and the *.entitlements changes, and a
	// key's expiry (RFC 3339).
	config.Entitlement
	ExpiresAt string `json:"expires_at,omitempty"`
}

// ParseChange decodes and checks a change body: one JSON object, no
// unknown fields, base_version and reason present, every bound respected.
func ParseChange(r io.Reader) (ChangeRequest, *apierr.Error) {
	var c ChangeRequest
	b, err := io.ReadAll(io.LimitReader(r, bodyBytesMax+1))
	if err != nil {
		return c, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "read body: "+err.Error())
	}
	if len(b) > bodyBytesMax {
		return c, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeBodyTooLarge, fmt.Sprintf("body above %d bytes", bodyBytesMax))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, apierr.New(http.StatusBadRequest, apierr.CodeInvalidJSON, "body: "+err.Error())
	}
	if dec.More() {
		return c, apierr.New(http.StatusBadRequest, apierr.CodeInvalidJSON, "body: one JSON object expected")
	}
	if c.BaseVersion == nil {
		return c, bad(apierr.CodeMissingField, "base_version: required (the version you read; GET the resource for it)")
	}
	if *c.BaseVersion < 0 {
		return c, bad(apierr.CodeInvalidValue, "base_version: must not be negative")
	}
	if strings.TrimSpace(c.Reason) == "" {
		return c, bad(apierr.CodeMissingField, "reason: required (it goes into the audited config history)")
	}
	if len(c.Reason) > reasonLenMax {
		return c, bad(apierr.CodeInvalidValue, "reason: longer than %d bytes", reasonLenMax)
	}
	if c.DeadlineMs < 0 || c.DeadlineMs > config.DeadlineMsMax {
		return c, bad(apierr.CodeInvalidValue, "deadline_ms: %d out of [0, %d]", c.DeadlineMs, int64(config.DeadlineMsMax))
	}
	if len(c.Limits) > maxLimitsPerLevel {
		return c, bad(apierr.CodeInvalidValue, "limits: %d entries, at most %d", len(c.Limits), maxLimitsPerLevel)
	}
	if p := c.MaxPriority; p != nil && (*p < -100 || *p > 100) {
		return c, bad(apierr.CodeInvalidValue, "max_priority: %d out of [-100, 100]", *p)
	}
	if len(c.AllowedClasses) > maxLimitsPerLevel || len(c.AllowedModels) > maxModelsPerLevel {
		return c, bad(apierr.CodeInvalidValue, "allowed_classes or allowed_models: too many entries (at most %d and %d)", maxLimitsPerLevel, maxModelsPerLevel)
	}
	if c.ExpiresAt != "" {
		if _, err := time.Parse(time.RFC3339, c.ExpiresAt); err != nil {
			return c, bad(apierr.CodeInvalidValue, "expires_at: %q is not an RFC 3339 time (e.g. 2027-01-31T00:00:00Z)", c.ExpiresAt)
		}
	}
	return c, nil
}

func newSecret(prefix string) (secret, sha string) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("admin: crypto/rand: %v", err)) // the OS has no randomness: nothing is safe
	}
	secret = prefix + hex.EncodeToString(b[:])
	return secret, config.HashKey(secret)
}

// change returns the handler of one kind of change.
func change(kind OpKind) func(*Handler, http.ResponseWriter, *http.Request, Actor) {
	return func(h *Handler, w http.ResponseWriter, r *http.Request, a Actor) {
		req, e := ParseChange(r.Body)
		if e != nil {
			writeErr(w, e)
			return
		}
		op := Op{Kind: kind, Tenant: r.PathValue("tenant"), Team: r.PathValue("team"), Key: r.PathValue("key"),
			Partner: r.PathValue("partner"), Limits: req.Limits}
		var secret string
		switch kind {
		case OpTenantCreate:
			op.Tenant, op.Org, op.PartnerOwner = req.ID, req.Org, req.Partner
		case OpTeamCreate:
			op.Team = req.ID
		case OpKeyCreate:
			op.Key = req.ID
			if op.Key == "" {
				op.Key = defaultKeyID(op.Tenant)
			}
			op.KeyDefaults = Key{Team: req.Team, App: req.App, Class: req.Class, Priority: req.Priority, DeadlineMs: req.DeadlineMs,
				Entitlement: req.Entitlement, ExpiresAt: req.ExpiresAt}
			secret, op.SecretSHA256 = newSecret(KeyPrefix)
		case OpKeyRotate:
			secret, op.SecretSHA256 = newSecret(KeyPrefix)
		case OpTenantEntitle, OpTeamEntitle, OpKeyEntitle, OpPartnerEntitle:
			op.Entitlement, op.ExpiresAt = req.Entitlement, req.ExpiresAt
		case OpPartnerCreate:
			op.Partner, op.Name, op.Entitlement = req.ID, req.Name, req.Entitlement
			secret, op.SecretSHA256 = newSecret(PartnerPrefix)
		case OpPartnerRotate:
			secret, op.SecretSHA256 = newSecret(PartnerPrefix)
		}
		st, err := h.store.Update(r.Context(), *req.BaseVersion, a, req.Reason, op)
		if err != nil {
			writeErr(w, AsAPIError(err))
			return
		}
		h.log.Info("admin change committed", "version", st.Version, "actor", a.String(), "change", op.Change())
		out := map[string]any{"version": st.Version, "change": op.Change()}
		switch {
		case op.Partner != "" && kind != OpTenantCreate:
			if p := st.partner(op.Partner); p != nil {
				out["partner"] = partnerView(&st, p)
			}
		case op.Tenant != "" && kind != OpTenantDelete:
			if t := st.tenant(op.Tenant); t != nil {
				out["tenant"] = tenantView(&st, t)
			}
		}
		switch kind {
		case OpKeyCreate, OpKeyRotate:
			// The only time the secret is ever shown: it is stored hashed.
			out["key_id"], out["api_key"] = op.Key, secret
		case OpPartnerCreate, OpPartnerRotate:
			out["partner_token"] = secret
		}
		writeJSON(w, statusOf(kind), out)
	}
}

func statusOf(kind OpKind) int {
	switch kind {
	case OpTenantCreate, OpTeamCreate, OpKeyCreate, OpPartnerCreate:
		return http.StatusCreated
	}
	return http.StatusOK
}

// defaultKeyID names a key the caller did not name: random, so that the
// pure change never draws randomness itself.
func defaultKeyID(tenant string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return tenant + ".k-" + hex.EncodeToString(b[:])
}

// TenantView is a tenant as the admin API shows it: no key hashes.
type TenantView struct {
	ID      string     `json:"id"`
	Org     string     `json:"org,omitempty"`
	Partner string     `json:"partner,omitempty"`
	Paused  bool       `json:"paused"`
	Limits  []Limit    `json:"limits"`
	Teams   []TeamView `json:"teams"`
	Keys    []KeyView  `json:"keys"`
	config.Entitlement
}

// TeamView is a team, its limits and its entitlement.
type TeamView struct {
	ID     string  `json:"id"`
	Limits []Limit `json:"limits"`
	config.Entitlement
}

// KeyView is a key without its hash.
type KeyView struct {
	ID         string  `json:"id"`
	Team       string  `json:"team,omitempty"`
	App        string  `json:"app,omitempty"`
	Class      string  `json:"class,omitempty"`
	Priority   int32   `json:"priority,omitempty"`
	DeadlineMs int64   `json:"deadline_ms,omitempty"`
	Revoked    bool    `json:"revoked"`
	Paused     bool    `json:"paused"`
	Limits     []Limit `json:"limits"`
	config.Entitlement
	ExpiresAt string `json:"expires_at,omitempty"`
}

func tenantView(s *State, t *Tenant) TenantView {
	v := TenantView{ID: t.ID, Org: t.Org, Partner: t.Partner, Paused: t.Paused, Entitlement: t.Entitlement,
		Limits: s.LimitsOf(ledger.LevelTenant, t.ID), Teams: []TeamView{}, Keys: []KeyView{}}
	for _, tm := range t.Teams {
		v.Teams = append(v.Teams, TeamView{ID: tm, Limits: s.LimitsOf(ledger.LevelTeam, tm), Entitlement: t.TeamEntitlements[tm]})
	}
	for _, k := range t.Keys {
		v.Keys = append(v.Keys, KeyView{ID: k.ID, Team: k.Team, App: k.App, Class: k.Class, Priority: k.Priority,
			DeadlineMs: k.DeadlineMs, Revoked: k.Revoked, Paused: k.Paused, Limits: s.LimitsOf(ledger.LevelKey, k.ID),
			Entitlement: k.Entitlement, ExpiresAt: k.ExpiresAt})
	}
	return v
}

// PartnerView is a partner without its token hash.
type PartnerView struct {
	ID        string   `json:"id"`
	Name      string   `json:"name,omitempty"`
	Allotment []Limit  `json:"allotment"`
	Tenants   []string `json:"tenants"`
	config.Entitlement
}

func partnerView(s *State, p *Partner) PartnerView {
	v := PartnerView{ID: p.ID, Name: p.Name, Allotment: s.LimitsOf(ledger.LevelOrg, p.ID), Tenants: []string{}, Entitlement: p.Entitlement}
	for _, t := range s.Tenants {
		if t.Partner == p.ID {
			v.Tenants = append(v.Tenants, t.ID)
		}
	}
	return v
}

func visible(a Actor, t *Tenant) bool { return a.Operator() || t.Partner == a.Partner }

func (h *Handler) listTenants(w http.ResponseWriter, _ *http.Request, a Actor) {
	st := h.store.State()
	out := []TenantView{}
	for i := range st.Tenants {
		if visible(a, &st.Tenants[i]) {
			out = append(out, tenantView(&st, &st.Tenants[i]))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": st.Version, "tenants": out})
}

func (h *Handler) getTenant(w http.ResponseWriter, r *http.Request, a Actor) {
	st := h.store.State()
	id := r.PathValue("tenant")
	t := st.tenant(id)
	if t == nil || !visible(a, t) {
		writeErr(w, notFound("tenant", id)) // the same answer whether it exists or not
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": st.Version, "tenant": tenantView(&st, t)})
}

func (h *Handler) listPartners(w http.ResponseWriter, _ *http.Request, a Actor) {
	if !a.Operator() {
		writeErr(w, operatorOnly("listing partners"))
		return
	}
	st := h.store.State()
	out := []PartnerView{}
	for i := range st.Partners {
		out = append(out, partnerView(&st, &st.Partners[i]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": st.Version, "partners": out})
}

func (h *Handler) getPartner(w http.ResponseWriter, r *http.Request, a Actor) {
	st := h.store.State()
	id := r.PathValue("partner")
	p := st.partner(id)
	if p == nil || (!a.Operator() && a.Partner != id) {
		writeErr(w, notFound("partner", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": st.Version, "partner": partnerView(&st, p)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeErr writes the one error contract (OpenAI shape); admin errors are
// never retryable by an SDK except 503 (the change was not committed).
func writeErr(w http.ResponseWriter, e *apierr.Error) {
	httperr.Write(w, e, false)
}
