// Package k8s holds Sluice's Kubernetes manifests (the *.yaml here, applied
// with `kubectl apply -f deploy/k8s/`) and the test that decodes every one
// of them strictly into the Kubernetes API types and the operators' custom
// resources, so that a misspelt field fails `make manifests`. It is its own
// module so that k8s.io stays out of the main module's dependencies.
package k8s
