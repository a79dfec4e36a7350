// Package coordinator is the control plane of mcpcancel: a gRPC service that
// decides, exactly once per call and in etcd, whether completion,
// cancellation or failure won. Every decision is one etcd transaction
// guarded by the call record's revision (the fence) that also writes the
// decision's audit record. Replicas hold no state another replica needs.
//
// Files, one per feature: begin.go (Begin and placement on the
// view of live workers, view.go), settle.go (the settle engine: one fenced
// transaction per decision), commit.go (group commit of concurrent
// decisions), calls.go (the Cancel, Complete, Fail and GetCall RPCs),
// resolve.go (finding a call by key or reference), running.go (the cache
// of calls this replica began), attach.go and workerlease.go (workers'
// control streams and their leases), audit.go (audit reads and the stop
// batcher), export.go, janitor.go, sessions.go, admin.go, health.go.
// Clients never import this package: they use api/client.
package coordinator
