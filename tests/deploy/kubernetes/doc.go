// Package kubernetes is the offline test of the plain manifests in deploy/kubernetes (the
// root module's, kustomize-ready: one pod per shard plus standbys): strict decoding into the
// Kubernetes API types (an unknown field is an error), the wiring between the objects, and the
// relay flags they use. It lives in the tests module because the API types (k8s.io,
// prometheus-operator) are no dependency of the library. It has no Go code of its own.
package kubernetes
