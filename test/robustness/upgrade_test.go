package robustness

import "testing"

// A call counts across releases by what its gateway, worker and the
// coordinators ran when it was requested; a part the log cannot name
// leaves it unattested, and unsettled calls and the operator's are not
// counted.
func TestSummarizeMixed(t *testing.T) {
	var rel releaseLog
	rel.setAt("c0", false, at(0))
	rel.setAt("c1", false, at(0))
	rel.setAt("gw0", false, at(0))
	rel.setAt("gw1", false, at(0))
	rel.setAt("w0-g0", false, at(0))
	rel.setAt("w1-g1", true, at(100)) // a worker rolled back
	rel.setAt("gw0", true, at(200))   // a gateway rolled back
	rel.setAt("gw0", false, at(300))  // and upgraded again
	rel.setAt("c1", true, at(400))    // a coordinator rolled back
	settled := func(id, gw, w string, ms int) *ServerCall {
		return &ServerCall{CallID: id, Principal: "p1", Gateway: gw, Worker: w, Requested: at(ms),
			States: []StateChange{{State: stRunning}, {State: stCompleted}}}
	}
	running := settled("running", "gw0", "w1-g1", 150)
	running.States = running.States[:1]
	operator := settled("operator", operatorPrincipal, "", 150)
	operator.Principal = operatorPrincipal
	h := &History{Server: map[string]*ServerCall{
		"same":      settled("same", "gw1", "w0-g0", 50),
		"oldworker": settled("oldworker", "gw1", "w1-g1", 150),
		"oldgw":     settled("oldgw", "gw0", "w0-g0", 250),
		"bothold":   settled("bothold", "gw0", "w1-g1", 250),
		"upgraded":  settled("upgraded", "gw0", "w0-g0", 350),
		"coordmix":  settled("coordmix", "gw1", "w0-g0", 450),
		"unknown":   settled("unknown", "gs9", "w0-g0", 450),
		"early":     settled("early", "gw1", "w1-g1", 50), // before w1-g1 started
		"running":   running,
		"operator":  operator,
	}}
	got := *summarizeMixed(h, &rel, 2, "v0.1.0", map[string]int{FRollback: 3, FUpgrade: 1})
	want := mixedSummary{Release: "v0.1.0", Rollbacks: 3, Upgrades: 1,
		OldGatewayNewWorker: 1, NewGatewayOldWorker: 1, OldGatewayNewCoordinators: 2,
		CoordinatorsMixed: 1, WithOld: 4, Unattested: 2}
	if got != want {
		t.Fatalf("summary\n got %+v\nwant %+v", got, want)
	}
}
