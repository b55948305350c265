package sdktest

// The providers' kinds' fields come from their adapters' registration
// (config.RegisterKind, in admission/provider's init): the configs these
// tests load are checked as the gateway's, with the adapters linked.
import _ "github.com/sluice-dev/sluice/admission/provider"
