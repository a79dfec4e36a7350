// Package robustness proves mcpcancel's promises under faults: it runs a
// cluster of real processes on loopback (3 etcd members, 2 coordinators,
// 3 workers, HTTP and stdio gateways), drives it with real MCP clients
// (the Go SDK and the TypeScript SDK scripts in test/clients), injects
// faults (SIGKILL and restart, SIGSTOP pauses, TCP proxies that drop,
// delay, blackhole or go silent for good, a worker drained mid-call, a
// client that stops reading, a Complete whose reply is lost), records
// every client observation, and checks the history against the audit
// records and the final etcd state. Its operator records coordinator
// operations of its own under the same faults, and the history is checked
// for linearizability (package linearize). Task clients (tasks.go) create
// 2025-11-25 tasks on one gateway and poll, wait for, list and cancel them
// through either, and kill_gateway kills the gateway that just created a
// task; CheckTasks (taskcheck.go) checks what they saw against etcd.
// The upgrade fault (upgrade.go) restarts a process, as a rolling
// restart does, on the last release's binary (built from the
// repository's history) and later back on this tree's, and the summary
// counts the calls settled by a gateway of one release with a worker or
// coordinators of the other.
//
// The checker (Check) is plain code over a History, so tests feed it
// hand-made bad histories too. Run the long form with
//
//	go test -timeout 60m ./test/robustness -run TestSoak -args -soak 30m -json out.json
//
// -upgrade-roles worker,gateway (after -args) leaves coordinators out of
// the upgrade fault, as the short run (the one CI runs) does.
package robustness
