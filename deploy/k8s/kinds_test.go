package k8s

// The providers' kinds' fields come from their adapters' registration
// (config.RegisterKind, in admission/provider's init): the gateway config
// of the manifests is checked as the gateway checks it, adapters linked.
import _ "github.com/sluice-dev/sluice/admission/provider"
