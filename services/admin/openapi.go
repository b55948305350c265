package admin

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// OpenAPI returns the admin API's OpenAPI 3 document, built from the route
// table so that it cannot leave a route out. docs/admin-openapi.json is
// the checked-in copy; a test keeps the two identical
// (`go test ./services/admin -run OpenAPI -update` rewrites it).
func OpenAPI() []byte {
	openAPIOnce.Do(func() {
		b, err := json.MarshalIndent(openAPIDoc(), "", "  ")
		if err != nil {
			panic(err) // plain maps: cannot fail
		}
		openAPIBytes = append(b, '\n')
	})
	return openAPIBytes
}

var (
	openAPIOnce  sync.Once
	openAPIBytes []byte
)

func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request, _ Actor) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI())
}

type obj = map[string]any

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

func ref(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

func jsonContent(schema obj) obj { return obj{"application/json": obj{"schema": schema}} }

func errResp(desc string) obj { return obj{"description": desc, "content": jsonContent(ref("Error"))} }

// openAPIDoc is the whole document: the paths come from the route table,
// the schemas are written out once below.
func openAPIDoc() obj {
	return obj{
		"openapi": "3.0.3",
		"info": obj{
			"title":       "Sluice admin API",
			"version":     "v1",
			"description": "Tenants, teams, API keys, limits per level, emergency pause and partners. Every change is committed as a ConfigChanged event (source admin-api) with its actor and reason, and takes effect on every gateway without a restart. See docs/admin-api.md.",
		},
		"security": []any{obj{"bearer": []any{}}},
		"paths":    openAPIPaths(),
		"components": obj{
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer", "description": "the operator token (gateway --admin-token / SLUICE_ADMIN_TOKEN / admin_token_env) or a partner token"}},
			"schemas":         openAPISchemas(),
		},
	}
}

// openAPIPaths has one operation per route, grouped by pattern as OpenAPI
// wants (one path item holds every method of a pattern).
func openAPIPaths() obj {
	paths := obj{}
	for _, rt := range Routes() {
		item, _ := paths[rt.Pattern].(obj)
		if item == nil {
			item = obj{}
			paths[rt.Pattern] = item
		}
		item[strings.ToLower(rt.Method)] = operation(rt)
	}
	return paths
}

// errorAnswer is one error status an operation documents.
type errorAnswer struct{ status, desc string }

// changeErrors are the errors every change route can answer, besides the
// token's.
var changeErrors = []errorAnswer{
	{"400", "invalid request, invalid_config or allotment_exceeded"},
	{"409", "version_conflict (base_version is stale) or already_exists"},
	{"503", "the change was not committed (Kafka unavailable); retry"},
}

// guardedErrors are the errors of every route behind the admin token (all
// but the public ones, such as this document).
var guardedErrors = []errorAnswer{
	{"401", "missing or invalid admin token"},
	{"403", "operator_required"},
	{"404", "not found, or not visible to this partner"},
}

// operation describes one route: a change takes a ChangeRequest and
// answers 201 when it creates; a public route needs no token; the path's
// {name} parameters are listed in order.
func operation(rt Route) obj {
	op := obj{
		"summary":     rt.Summary,
		"operationId": operationID(rt),
		"responses": obj{
			"200": obj{"description": "OK", "content": jsonContent(ref(rt.Response))},
		},
	}
	resp := op["responses"].(obj)
	if rt.Change {
		op["requestBody"] = obj{"required": true, "content": jsonContent(ref("ChangeRequest"))}
		if statusOf(rt.Kind) == http.StatusCreated {
			resp["201"] = resp["200"]
			delete(resp, "200")
		}
		for _, e := range changeErrors {
			resp[e.status] = errResp(e.desc)
		}
	}
	if !rt.public {
		for _, e := range guardedErrors {
			resp[e.status] = errResp(e.desc)
		}
	} else {
		op["security"] = []any{}
	}
	if rt.Change {
		resp["403"] = errResp("operator_required, or not_admin_writer (the deployment signs its config and this gateway does not hold the signing key)")
	}
	var params []any
	for _, m := range pathParam.FindAllStringSubmatch(rt.Pattern, -1) {
		params = append(params, obj{"name": m[1], "in": "path", "required": true, "schema": obj{"type": "string"}})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	return op
}

// openAPISchemas are the document's schemas. The entitlement fields
// (config.Entitlement) appear on a tenant, a team, a key and the change
// requests that set them, so they are written once and merged in.
func openAPISchemas() obj {
	str := obj{"type": "string"}
	i64 := obj{"type": "integer", "format": "int64"}
	boolean := obj{"type": "boolean"}
	arr := func(o obj) obj { return obj{"type": "array", "items": o} }
	limit := obj{"type": "object", "required": []any{"dimension", "capacity"}, "properties": obj{
		"scope":     obj{"type": "string", "description": "provider scope; empty = every scope of the ledger document"},
		"dimension": obj{"type": "string", "enum": []any{"requests", "input_tokens", "output_tokens", "total_tokens", "concurrency", "requests_per_day", "spend", "ramp"}},
		"capacity":  i64, "refill": str, "period_ms": i64, "window_ms": i64,
	}}
	entitlement := obj{
		"allowed_classes": obj{"type": "array", "items": str, "description": "traffic classes the holder's requests may use (X-Sluice-Class); absent = any; a class outside it is 403 class_not_entitled"},
		"max_priority":    obj{"type": "integer", "minimum": -100, "maximum": 100, "description": "highest X-Sluice-Priority; absent = 100; above it is 403 priority_not_entitled"},
		"allowed_models":  obj{"type": "array", "items": str, "description": "public models the holder may call; absent = any; another is 403 model_not_allowed"},
	}
	expiresAt := obj{"type": "string", "format": "date-time", "description": "RFC 3339; from then on the key gets 401 invalid_api_key (absent = never)"}
	with := func(props obj, extra obj) obj {
		out := obj{}
		for k, v := range props {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	return obj{
		"OpenAPI": obj{"type": "object", "description": "this document"},
		"Limit":   limit,
		"ChangeRequest": obj{"type": "object", "required": []any{"base_version", "reason"}, "additionalProperties": false, "properties": with(entitlement, obj{
			"base_version": obj{"type": "integer", "format": "int64", "description": "the version the caller read; 409 version_conflict if it is not current"},
			"reason":       obj{"type": "string", "maxLength": reasonLenMax, "description": "why, for the audited config history"},
			"id":           str, "org": str, "partner": str, "name": str, "team": str, "app": str, "class": str,
			"priority":    obj{"type": "integer", "minimum": -100, "maximum": 100},
			"deadline_ms": i64,
			"limits":      obj{"type": "array", "maxItems": maxLimitsPerLevel, "items": ref("Limit")},
			"expires_at":  expiresAt,
		})},
		"ChangeResponse": obj{"type": "object", "required": []any{"version", "change"}, "properties": obj{
			"version": i64, "change": str,
			"tenant":        ref("Tenant"),
			"partner":       ref("Partner"),
			"key_id":        str,
			"api_key":       obj{"type": "string", "description": "the new key, shown once (key create and rotate)"},
			"partner_token": obj{"type": "string", "description": "the new partner token, shown once"},
		}},
		"Team": obj{"type": "object", "properties": with(entitlement, obj{"id": str, "limits": arr(ref("Limit"))})},
		"Key": obj{"type": "object", "properties": with(entitlement, obj{"id": str, "team": str, "app": str, "class": str,
			"priority": obj{"type": "integer"}, "deadline_ms": i64, "revoked": boolean, "paused": boolean, "limits": arr(ref("Limit")),
			"expires_at": expiresAt})},
		"Tenant": obj{"type": "object", "properties": with(entitlement, obj{"id": str, "org": str, "partner": str, "paused": boolean,
			"limits": arr(ref("Limit")), "teams": arr(ref("Team")), "keys": arr(ref("Key"))})},
		"TenantResponse": obj{"type": "object", "properties": obj{"version": i64, "tenant": ref("Tenant")}},
		"TenantList":     obj{"type": "object", "properties": obj{"version": i64, "tenants": arr(ref("Tenant"))}},
		"Partner": obj{"type": "object", "properties": with(entitlement, obj{"id": str, "name": str,
			"allotment": arr(ref("Limit")), "tenants": arr(str)})},
		"PartnerResponse": obj{"type": "object", "properties": obj{"version": i64, "partner": ref("Partner")}},
		"PartnerList":     obj{"type": "object", "properties": obj{"version": i64, "partners": arr(ref("Partner"))}},
		"Error": obj{"type": "object", "properties": obj{"error": obj{"type": "object", "properties": obj{
			"message": str, "type": str, "code": str, "param": str, "sluice": obj{"type": "object"}}}}},
	}
}

// operationID is a stable camel-case name: POST /admin/v1/tenants/{tenant}/keys → postTenantsTenantKeys.
func operationID(rt Route) string {
	var sb strings.Builder
	sb.WriteString(strings.ToLower(rt.Method))
	for _, seg := range strings.Split(strings.TrimPrefix(rt.Pattern, "/admin/v1/"), "/") {
		seg = strings.Trim(seg, "{}")
		seg = strings.ReplaceAll(seg, ".", "_")
		if seg == "" {
			continue
		}
		sb.WriteString(strings.ToUpper(seg[:1]) + seg[1:])
	}
	return sb.String()
}
