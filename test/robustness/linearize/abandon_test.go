package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func namedBegin(client int, call, ret int64, beginID string, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpBegin, Key: k1, BeginID: beginID}, out)
}

func abandon(client int, call, ret int64, beginID string, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpAbandon, Key: k1, BeginID: beginID, Initiator: "disconnect", Reason: "lost"}, out)
}

// A Begin and its abandonment: exactly one wins, and the loser leaves no
// trace, in every order the histories allow.
func TestModelAbandonedBegins(t *testing.T) {
	for _, tc := range []struct {
		name string
		want porcupine.CheckResult
		h    []porcupine.Operation
	}{
		{"abandoned before it committed: never placed", porcupine.Ok, []porcupine.Operation{
			namedBegin(0, 0, -1, "A", Output{}), abandon(1, 2, 3, "A", Output{Result: RNotBegun}),
			op(2, 4, 5, Input{Op: OpGetKey, Key: k1}, Output{Result: RNotFound}),
		}},
		{"the abandoned Begin answered ABANDONED", porcupine.Ok, []porcupine.Operation{
			abandon(1, 0, 1, "A", Output{Result: RNotBegun}), namedBegin(0, 2, 3, "A", Output{Result: RAbandoned}),
		}},
		{"committed first: abandoning fails it", porcupine.Ok, []porcupine.Operation{
			namedBegin(0, 0, 1, "A", Output{ID: "x"}), abandon(1, 2, 3, "A", Output{Result: RWon, ID: "x"}),
			abandon(1, 4, 5, "A", Output{Result: RWon, ID: "x"}), getKey(2, 6, 7, "x", Failed),
		}},
		{"a Begin whose reply was lost, found and failed", porcupine.Ok, []porcupine.Operation{
			namedBegin(0, 0, -1, "A", Output{}), abandon(1, 2, 3, "A", Output{Result: RWon, ID: "x"}), getKey(2, 4, 5, "x", Failed),
		}},
		{"a cancel won first and is named", porcupine.Ok, []porcupine.Operation{
			namedBegin(0, 0, 1, "A", Output{ID: "x"}), cancelKey(1, 2, 3, RCancelled),
			abandon(1, 4, 5, "A", Output{Result: RAlreadyCancelled, ID: "x"}),
		}},
		{"another Begin's call is not the abandoned one's", porcupine.Ok, []porcupine.Operation{
			namedBegin(0, 0, 1, "B", Output{ID: "y"}), abandon(1, 2, 3, "A", Output{Result: RNotBegun}), getKey(2, 4, 5, "y", Running),
		}},

		{"an abandoned Begin placed a call after all", porcupine.Illegal, []porcupine.Operation{
			abandon(1, 0, 1, "A", Output{Result: RNotBegun}), namedBegin(0, 2, 3, "A", Output{ID: "x"}),
		}},
		{"a lost Begin's call appeared after its abandonment found none", porcupine.Illegal, []porcupine.Operation{
			namedBegin(0, 0, -1, "A", Output{}), abandon(1, 2, 3, "A", Output{Result: RNotBegun}), getKey(2, 4, 5, "x", Running),
		}},
		{"the abandonment missed a committed Begin", porcupine.Illegal, []porcupine.Operation{
			namedBegin(0, 0, 1, "A", Output{ID: "x"}), abandon(1, 2, 3, "A", Output{Result: RNotBegun}),
		}},
		{"ABANDONED with no abandonment", porcupine.Illegal, []porcupine.Operation{
			namedBegin(0, 0, 1, "A", Output{Result: RAbandoned}),
		}},
		{"abandoned and completed both won", porcupine.Illegal, []porcupine.Operation{
			namedBegin(0, 0, 1, "A", Output{ID: "x"}), complete(1, 2, 3, "x", RWon), abandon(2, 4, 5, "A", Output{Result: RWon, ID: "x"}),
		}},
		{"the abandonment failed a call no longer running", porcupine.Illegal, []porcupine.Operation{
			namedBegin(0, 0, 1, "A", Output{ID: "x"}), abandon(1, 2, 3, "A", Output{Result: RWon, ID: "x"}), getKey(2, 4, 5, "x", Running),
		}},
		{"the abandonment named another Begin's call", porcupine.Illegal, []porcupine.Operation{
			namedBegin(0, 0, 1, "B", Output{ID: "y"}), abandon(1, 2, 3, "A", Output{Result: RWon, ID: "y"}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(Options{}, tc.h, 10*time.Second, "")
			if err != nil || r.Result != tc.want {
				t.Fatalf("check = %v (%v), want %v", r.Result, err, tc.want)
			}
		})
	}
}

// With retention, a Begin's call that settled may have expired under its
// index entry: abandoning it then finds nothing to fail. A running call
// cannot have expired.
func TestModelAbandonAfterRetention(t *testing.T) {
	settled := []porcupine.Operation{
		namedBegin(0, 0, 1, "A", Output{ID: "x"}), complete(1, 2, 3, "x", RWon),
		abandon(1, 4, 5, "A", Output{Result: RNotFound}), op(2, 6, 7, Input{Op: OpGetID, Key: k1, ID: "x"}, Output{Result: RNotFound}),
	}
	if r, _ := Check(Options{Retention: true}, settled, 10*time.Second, ""); r.Result != porcupine.Ok {
		t.Errorf("a settled call's record expired: %v, want Ok", r.Result)
	}
	if r, _ := Check(Options{}, settled, 10*time.Second, ""); r.Result != porcupine.Illegal {
		t.Errorf("without retention: %v, want Illegal", r.Result)
	}
	running := []porcupine.Operation{
		namedBegin(0, 0, 1, "A", Output{ID: "x"}), abandon(1, 2, 3, "A", Output{Result: RNotFound}),
	}
	if r, _ := Check(Options{Retention: true}, running, 10*time.Second, ""); r.Result != porcupine.Illegal {
		t.Errorf("a running call's record expired: %v, want Illegal", r.Result)
	}
}
