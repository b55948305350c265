package apierr

// Codes of the admin API (/admin/v1) and of the tenant usage endpoint. They
// are stable like the others: operators' scripts and partners match on them.
const (
	// CodeMissingAdminToken: no operator or partner token was presented.
	CodeMissingAdminToken = "missing_admin_token"
	// CodeInvalidAdminToken: the token is neither the operator token nor a
	// partner's.
	CodeInvalidAdminToken = "invalid_admin_token"
	// CodeOperatorRequired: the call is for the operator only (partners
	// manage their own tenants, never partners or other levels).
	CodeOperatorRequired = "operator_required"
	// CodeVersionConflict: the request's base_version is not the current
	// version; read the resource again and re-apply the change.
	CodeVersionConflict = "version_conflict"
	// CodeAlreadyExists: a tenant, team, key or partner with that id exists.
	CodeAlreadyExists = "already_exists"
	// CodeAllotmentExceeded: a partner's sub-tenant limits would add up to
	// more than the partner's allotment.
	CodeAllotmentExceeded = "allotment_exceeded"
	// CodeEntitlementExceeded: a partner tried to grant a class, priority
	// or model beyond its own entitlement.
	CodeEntitlementExceeded = "entitlement_exceeded"
	// CodeInvalidConfig: the change would produce a configuration the
	// gateway or the ledger refuses; the message lists every problem.
	CodeInvalidConfig = "invalid_config"
	// CodeNotAdminWriter: the deployment signs its config changes
	// (SLUICE_ADMIN_PUBLIC_KEY) and this gateway does not hold the signing
	// key, so a change it wrote would be refused by every ledger; send
	// the change to the admin writer.
	CodeNotAdminWriter = "not_admin_writer"
)
