package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func start(client int, call, ret int64, beginID string, out Output) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpStart, Key: k1, BeginID: beginID}, out)
}

// byPlacement is a decision (OpComplete, OpFail, OpCancelRef) naming call
// id by the placement of the Start named beginID.
func byPlacement(client int, call, ret int64, kind, id, beginID, initiator, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: kind, Key: k1, ID: id, BeginID: beginID, Initiator: initiator, Placed: true}, Output{Result: result})
}

func getID(client int, call, ret int64, id, st string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpGetID, Key: k1, ID: id}, Output{ID: id, State: st})
}

// A Start and the decisions made by its placement: the Begin and a
// decision race, and exactly one of them records the call.
func TestModelStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		want porcupine.CheckResult
		o    Options
		h    []porcupine.Operation
	}{
		{"begun first: the decision by placement settles the record", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, 4, "A", Output{ID: "x"}), byPlacement(1, 1, 5, OpComplete, "x", "A", "", RWon), getKey(2, 6, 7, "x", Completed),
		}},
		{"decided first: the decision creates the record, the Begin finds it settled", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, 4, "A", Output{ID: "x", Result: RSettled}), byPlacement(1, 1, 2, OpFail, "x", "A", WorkerLost, RWon),
			getKey(2, 5, 6, "x", Failed), getID(2, 7, 8, "x", Failed),
		}},
		{"a cancel by placement creates the record; a key cancel finds it decided", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, 6, "A", Output{ID: "x", Result: RSettled}), byPlacement(1, 1, 2, OpCancelRef, "x", "A", "timeout", RCancelled),
			cancelKey(2, 3, 4, RAlreadyCancelled), byPlacement(1, 5, 7, OpComplete, "x", "A", "", RAlreadyCancelled),
		}},
		{"the owner's decision by placement, repeated, is won again", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, 9, "A", Output{ID: "x", Result: RSettled}), byPlacement(1, 1, 2, OpComplete, "x", "A", "", RWon),
			byPlacement(1, 3, 4, OpComplete, "x", "A", "", RWon), byPlacement(2, 5, 6, OpFail, "x", "A", WorkerLost, RAlreadyCompleted),
		}},
		{"a decision of unknown outcome that created the record", porcupine.Ok, Options{}, []porcupine.Operation{
			byPlacement(1, 0, -1, OpComplete, "x", "A", "", ""), start(0, 1, 3, "A", Output{ID: "x", Result: RSettled}),
		}},
		{"a Start of unknown outcome that placed its call", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, -1, "A", Output{ID: "x"}), byPlacement(1, 1, 2, OpCancelRef, "x", "A", "timeout", RCancelled), getKey(2, 3, 4, "x", Cancelled),
		}},
		{"abandoned first: nothing recorded, the decision refused", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, 5, "A", Output{ID: "x", Result: RAbandoned}), abandon(1, 1, 2, "A", Output{Result: RNotBegun}),
			byPlacement(1, 3, 4, OpFail, "x", "A", WorkerLost, RNotFound), op(2, 6, 7, Input{Op: OpGetKey, Key: k1}, Output{Result: RNotFound}),
		}},
		{"decided first, then abandoned: the abandonment finds the decision", porcupine.Ok, Options{}, []porcupine.Operation{
			start(0, 0, 7, "A", Output{ID: "x", Result: RSettled}), byPlacement(1, 1, 2, OpFail, "x", "A", WorkerLost, RWon),
			abandon(1, 3, 4, "A", Output{Result: RAlreadyFailed, ID: "x"}), getKey(2, 5, 6, "x", Failed),
		}},
		{"the key busy: the Start and its decision both refused", porcupine.Ok, Options{}, []porcupine.Operation{
			begin(0, 1, "a"), start(1, 2, 5, "B", Output{ID: "x", Result: RDuplicate}),
			byPlacement(2, 3, 4, OpComplete, "x", "B", "", RDuplicate), getKey(2, 6, 7, "a", Running),
		}},
		{"the key free again: the created call replaces a settled one", porcupine.Ok, Options{}, []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 3, "a", RWon), byPlacement(1, 4, 5, OpFail, "x", "B", "tool", RWon),
			start(0, 4, 6, "B", Output{ID: "x", Result: RSettled}), getKey(2, 7, 8, "x", Failed),
		}},
		{"with the janitor, a completion by placement finds its worker replaced", porcupine.Ok, Options{Janitor: true}, []porcupine.Operation{
			start(0, 0, 3, "A", Output{Result: RRefused}), byPlacement(1, 1, 2, OpComplete, "x", "A", "", RNotFound),
			byPlacement(1, 4, 5, OpFail, "x", "A", WorkerLost, RWon),
		}},

		{"two decisions both won", porcupine.Illegal, Options{}, []porcupine.Operation{
			start(0, 0, 5, "A", Output{ID: "x", Result: RSettled}), byPlacement(1, 1, 3, OpComplete, "x", "A", "", RWon),
			byPlacement(2, 2, 4, OpCancelRef, "x", "A", "timeout", RCancelled),
		}},
		{"the Begin placed a call whose record a decision had created", porcupine.Illegal, Options{}, []porcupine.Operation{
			byPlacement(1, 0, 1, OpFail, "x", "A", WorkerLost, RWon), start(0, 2, 3, "A", Output{ID: "x"}),
		}},
		{"SETTLED with no decision", porcupine.Illegal, Options{}, []porcupine.Operation{
			start(0, 0, 1, "A", Output{ID: "x", Result: RSettled}), byPlacement(1, 2, 3, OpComplete, "x", "A", "", RWon),
		}},
		{"SETTLED when the Begin had placed the call itself", porcupine.Illegal, Options{}, []porcupine.Operation{
			start(0, 0, -1, "A", Output{ID: "x"}), getKey(1, 1, 2, "x", Running), byPlacement(1, 3, 4, OpComplete, "x", "A", "", RWon),
			start(2, 5, 6, "A", Output{ID: "x", Result: RSettled}),
		}},
		{"a decision created the record after the abandonment", porcupine.Illegal, Options{}, []porcupine.Operation{
			abandon(1, 0, 1, "A", Output{Result: RNotBegun}), byPlacement(1, 2, 3, OpFail, "x", "A", WorkerLost, RWon),
		}},
		{"a decision created a record while the key's call ran", porcupine.Illegal, Options{}, []porcupine.Operation{
			begin(0, 1, "a"), byPlacement(1, 2, 3, OpComplete, "x", "B", "", RWon),
		}},
		{"a created record read as running", porcupine.Illegal, Options{}, []porcupine.Operation{
			byPlacement(1, 0, 1, OpComplete, "x", "A", "", RWon), getID(2, 2, 3, "x", Running),
		}},
		{"a completion by placement refused with no cause", porcupine.Illegal, Options{}, []porcupine.Operation{
			byPlacement(1, 0, 1, OpComplete, "x", "A", "", RNotFound),
		}},
		{"a Start abandoned with no abandonment", porcupine.Illegal, Options{}, []porcupine.Operation{
			start(0, 0, 1, "A", Output{ID: "x", Result: RAbandoned}),
		}},
		{"the Begin committed after its abandonment", porcupine.Illegal, Options{}, []porcupine.Operation{
			abandon(1, 0, 1, "A", Output{Result: RNotBegun}), start(0, 2, 3, "A", Output{ID: "x"}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(tc.o, tc.h, 10*time.Second, "")
			if err != nil || r.Result != tc.want {
				t.Fatalf("check = %v (%v), want %v", r.Result, err, tc.want)
			}
		})
	}
}
