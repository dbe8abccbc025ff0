// Package kubernetes holds the plain manifests (kustomize-ready) that run outbox-relay on
// Kubernetes, one pod per shard plus standbys, and the offline test that validates them: strict
// decoding into the Kubernetes API types (an unknown field is an error), the wiring between the
// objects, and the relay flags they use. It has no Go code of its own.
package kubernetes
