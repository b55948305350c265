package config_test

// The provider fields a kind needs come from its adapter's registration
// (config.RegisterKind, from admission/provider's init): these tests load
// configs as the gateway does, with the adapters linked.
import _ "github.com/sluice-dev/sluice/admission/provider"
