package robustness

import (
	"encoding/json"
	"testing"
	"time"
)

// A call its client saw, which etcd never held, is a violation unless
// its gateway and a worker were both killed between its request and
// what the client saw; a refusal to place it shows nothing.
func TestCheckerCallsWithoutRecord(t *testing.T) {
	seenCall := func(responses ...Response) *ClientCall {
		return &ClientCall{Ref: "unrecorded", Client: "go-http", Owner: "p9", Gateway: gatewayName(1), RequestID: json.RawMessage("7"),
			Tool: "sleep", Sent: at(0), Responses: responses}
	}
	progressed := seenCall()
	progressed.Progress = []time.Time{at(30)}
	for _, tc := range []struct {
		name    string
		c       *ClientCall
		kills   []Kill
		want    int // violations
		excused int
	}{
		{"progress, nothing killed", progressed, nil, 1, 0},
		{"an error result, nothing killed", seenCall(Response{At: at(40), Kind: "error_result", Text: "worker lost"}), nil, 1, 0},
		{"progress, its gateway and a worker killed in the window", progressed,
			[]Kill{{Kind: "gateway", Name: gatewayName(1), At: at(2)}, {Kind: "worker", Name: "w0", At: at(3)}}, 0, 1},
		{"progress, only its gateway killed", progressed, []Kill{{Kind: "gateway", Name: gatewayName(1), At: at(2)}}, 1, 0},
		{"progress, another gateway and a worker killed", progressed,
			[]Kill{{Kind: "gateway", Name: gatewayName(0), At: at(2)}, {Kind: "worker", Name: "w0", At: at(3)}}, 1, 0},
		{"progress, both killed before the request", progressed,
			[]Kill{{Kind: "gateway", Name: gatewayName(1), At: at(-20)}, {Kind: "worker", Name: "w0", At: at(-10)}}, 1, 0},
		{"progress, both killed after the client saw it", progressed,
			[]Kill{{Kind: "gateway", Name: gatewayName(1), At: at(31)}, {Kind: "worker", Name: "w0", At: at(32)}}, 1, 0},
		{"a refusal shows nothing", seenCall(Response{At: at(5), Kind: "rpc_error", Text: "the call could not be started: no worker"}), nil, 0, 0},
		{"nothing seen", seenCall(), nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodHistory()
			h.Client = append(h.Client, tc.c)
			h.Kills = tc.kills
			var got []Violation
			for _, v := range Check(h) {
				if v.Kind == VSeenWithoutRecord {
					got = append(got, v)
				}
			}
			nr := checkRecorded(h, indexServer(h.Server))
			if len(got) != tc.want || nr.excused != tc.excused {
				t.Fatalf("%d %s violations, %d excused; want %d, %d:\n%s", len(got), VSeenWithoutRecord, nr.excused, tc.want, tc.excused, Report(0, got))
			}
		})
	}
}

// A record written anew after it expired, with the same state, leaves
// only its creation count to show it.
func TestCheckerRecordCreatedTwice(t *testing.T) {
	h := goodHistory()
	h.Server["b"].Created = 2
	h.Server["b"].Audits = append(h.Server["b"].Audits, Audit{Outcome: "cancelled", Initiator: "client", Settled: at(20000), Key: "k7"})
	kinds := map[string]int{}
	for _, v := range Check(h) {
		kinds[v.Kind]++
	}
	if kinds[VTwoOutcomes] != 1 || kinds[VAuditCount] != 1 {
		t.Fatalf("violations %v; want one %s and one %s", kinds, VTwoOutcomes, VAuditCount)
	}
	h.Server["b"].Created = 1
	h.Server["b"].Audits = h.Server["b"].Audits[:1]
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("a record created once: %s", Report(0, vs))
	}
}
