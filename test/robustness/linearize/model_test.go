package linearize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const k1 = "conn:a|1"

// op is a hand-made operation: invoked at call, answered at ret (-1: its
// outcome is unknown).
func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	if ret < 0 {
		out.Unknown, ret = true, 1000
	}
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func begin(call, ret int64, id string) porcupine.Operation {
	return op(0, call, ret, Input{Op: OpBegin, Key: k1}, Output{ID: id})
}

func complete(client int, call, ret int64, id, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpComplete, Key: k1, ID: id}, Output{Result: result})
}

func cancelKey(client int, call, ret int64, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpCancelKey, Key: k1, Initiator: "client"}, Output{Result: result})
}

func getKey(client int, call, ret int64, id, st string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpGetKey, Key: k1}, Output{ID: id, State: st})
}

func failRef(client int, call, ret int64, id, initiator, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpFail, Key: k1, ID: id, Initiator: initiator}, Output{Result: result})
}

// TestModelAcceptsLinearizableHistories: races that some order explains.
func TestModelAcceptsLinearizableHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
	}{
		{"complete and cancel overlap, complete won", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 6, "a", RWon), cancelKey(2, 3, 5, RAlreadyCompleted), getKey(3, 7, 8, "a", Completed),
		}},
		{"complete and cancel overlap, cancel won", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 6, "a", RAlreadyCancelled), cancelKey(2, 3, 5, RCancelled), getKey(3, 7, 8, "a", Cancelled),
		}},
		{"a read during the cancel sees either state", []porcupine.Operation{
			begin(0, 1, "a"), cancelKey(1, 2, 6, RCancelled), getKey(2, 3, 4, "a", Running), getKey(3, 5, 7, "a", Cancelled),
		}},
		{"a Begin whose reply was lost, learned by a read", []porcupine.Operation{
			begin(0, -1, ""), getKey(1, 5, 6, "b", Running), cancelKey(2, 7, 8, RCancelled),
		}},
		{"a cancel of unknown outcome that took effect", []porcupine.Operation{
			begin(0, 1, "a"), cancelKey(1, 2, -1, ""), complete(2, 5, 6, "a", RAlreadyCancelled),
		}},
		{"a cancel of unknown outcome that did not", []porcupine.Operation{
			begin(0, 1, "a"), cancelKey(1, 2, -1, ""), complete(2, 5, 6, "a", RWon),
		}},
		{"a lost call retried", []porcupine.Operation{
			begin(0, 1, "a"), failRef(1, 2, 3, "a", WorkerLost, RWon),
			op(0, 4, 5, Input{Op: OpRetry, Key: k1, ID: "a"}, Output{ID: "b"}),
			op(1, 6, 7, Input{Op: OpRetry, Key: k1, ID: "a"}, Output{Result: RNotRetryable}),
			getKey(2, 8, 9, "b", Running),
		}},
		{"the owner's repeated decision is its own, won again", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 3, "a", RWon), complete(1, 4, 5, "a", RWon), cancelKey(2, 6, 7, RAlreadyCompleted),
			failRef(2, 8, 9, "a", WorkerLost, RAlreadyCompleted),
		}},
		{"the id reused after the call settled", []porcupine.Operation{
			begin(0, 1, "a"), op(1, 2, 3, Input{Op: OpBegin, Key: k1}, Output{Result: RDuplicate}),
			complete(2, 4, 5, "a", RWon), begin(6, 7, "b"), getKey(1, 8, 9, "b", Running),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(Options{}, tc.h, 10*time.Second, "")
			if err != nil || r.Result != porcupine.Ok {
				t.Fatalf("%v, %v; want Ok", r, err)
			}
		})
	}
}

// TestModelRejectsAnomalies: the anomalies issue 22 names, each made by
// hand, are each rejected, and the visualisation is written.
func TestModelRejectsAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
	}{
		{"a completion visible before its Complete was invoked", []porcupine.Operation{
			begin(0, 1, "a"), getKey(1, 2, 3, "a", Completed), complete(2, 4, 5, "a", RWon),
		}},
		{"two winners", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 5, "a", RWon), cancelKey(2, 3, 6, RCancelled),
		}},
		{"a cancel acknowledged, then read running", []porcupine.Operation{
			begin(0, 1, "a"), cancelKey(1, 2, 3, RCancelled), getKey(2, 4, 5, "a", Running),
		}},
		{"ALREADY_COMPLETED before any completion", []porcupine.Operation{
			begin(0, 1, "a"), cancelKey(1, 2, 3, RAlreadyCompleted), complete(2, 4, 5, "a", RWon),
		}},
		{"a retry of a call not lost with its worker", []porcupine.Operation{
			begin(0, 1, "a"), failRef(1, 2, 3, "a", "tool", RWon),
			op(0, 4, 5, Input{Op: OpRetry, Key: k1, ID: "a"}, Output{ID: "b"}),
		}},
		{"two retries placed", []porcupine.Operation{
			begin(0, 1, "a"), failRef(1, 2, 3, "a", WorkerLost, RWon),
			op(0, 4, 6, Input{Op: OpRetry, Key: k1, ID: "a"}, Output{ID: "b"}),
			op(1, 4, 6, Input{Op: OpRetry, Key: k1, ID: "a"}, Output{ID: "c"}),
		}},
		{"a second call placed while the first runs", []porcupine.Operation{
			begin(0, 1, "a"), begin(2, 3, "b"),
		}},
		{"a decision by another initiator is no repeat", []porcupine.Operation{
			begin(0, 1, "a"), failRef(1, 2, 3, "a", "tool", RWon), failRef(1, 4, 5, "a", WorkerLost, RWon),
		}},
		{"a scope cancel that missed a running call", []porcupine.Operation{
			begin(0, 1, "a"), op(1, 2, 3, Input{Op: OpCancelScope, Key: k1, Initiator: "disconnect"}, Output{}),
			getKey(2, 4, 5, "a", Running),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			html := filepath.Join(t.TempDir(), "history.html")
			r, err := Check(Options{}, tc.h, 10*time.Second, html)
			if err != nil || r.Result != porcupine.Illegal {
				t.Fatalf("%v, %v; want Illegal", r, err)
			}
			if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), "<html") {
				t.Fatalf("no visualisation written: %v", err)
			}
		})
	}
}

// TestModelJanitor: with the janitor allowed, a call may fail with no
// recorded operation, but never after it settled otherwise.
func TestModelJanitor(t *testing.T) {
	lostByJanitor := []porcupine.Operation{begin(0, 1, "a"), complete(1, 2, 3, "a", RAlreadyFailed)}
	if r, _ := Check(Options{}, lostByJanitor, 10*time.Second, ""); r.Result != porcupine.Illegal {
		t.Fatalf("without the janitor: %v, want Illegal", r)
	}
	if r, _ := Check(Options{Janitor: true}, lostByJanitor, 10*time.Second, ""); r.Result != porcupine.Ok {
		t.Fatalf("with the janitor: %v, want Ok", r)
	}
	// The janitor's failure is not the owner's: the owner's own Fail with
	// the same initiator finds it and loses (coordinator madeBy compares
	// the reason too; the janitor's is its own). The retry shows the
	// janitor failed it as lost, not as late.
	ownerFailsAfterJanitor := []porcupine.Operation{begin(0, 1, "a"),
		op(0, 2, 3, Input{Op: OpRetry, Key: k1, ID: "a"}, Output{ID: "b"}), failRef(1, 4, 5, "a", WorkerLost, RAlreadyFailed)}
	if r, _ := Check(Options{Janitor: true}, ownerFailsAfterJanitor, 10*time.Second, ""); r.Result != porcupine.Ok {
		t.Fatalf("the owner's Fail after the janitor's: %v, want Ok", r)
	}
	repeatedLoses := []porcupine.Operation{begin(0, 1, "a"), failRef(1, 2, 3, "a", WorkerLost, RWon), failRef(1, 4, 5, "a", WorkerLost, RAlreadyFailed)}
	if r, _ := Check(Options{Janitor: true}, repeatedLoses, 10*time.Second, ""); r.Result != porcupine.Illegal {
		t.Fatalf("the owner's repeated Fail losing to itself: %v, want Illegal", r)
	}
	afterCompletion := []porcupine.Operation{begin(0, 1, "a"), complete(1, 2, 3, "a", RWon), getKey(2, 4, 5, "a", Failed)}
	if r, _ := Check(Options{Janitor: true}, afterCompletion, 10*time.Second, ""); r.Result != porcupine.Illegal {
		t.Fatalf("a failure after completion: %v, want Illegal", r)
	}
}

// TestModelRetention: with retention, a settled call may go missing, but a
// running one may not, and a call found missing is not found again.
func TestModelRetention(t *testing.T) {
	getID := func(client int, call, ret int64, id, st, result string) porcupine.Operation {
		return op(client, call, ret, Input{Op: OpGetID, Key: k1, ID: id}, Output{State: st, Result: result})
	}
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"a settled call expires", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 3, "a", RWon), getID(1, 4, 5, "a", "", RNotFound), cancelKey(1, 6, 7, RUnknown),
		}, porcupine.Ok},
		{"a running call cannot expire", []porcupine.Operation{
			begin(0, 1, "a"), getID(1, 4, 5, "a", "", RNotFound),
		}, porcupine.Illegal},
		{"the index expires before the record", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 3, "a", RWon), op(1, 4, 5, Input{Op: OpGetKey, Key: k1}, Output{Result: RNotFound}), getID(1, 6, 7, "a", Completed, ""),
		}, porcupine.Ok},
		{"an expired call does not come back", []porcupine.Operation{
			begin(0, 1, "a"), complete(1, 2, 3, "a", RWon), getID(1, 4, 5, "a", "", RNotFound), getID(1, 6, 7, "a", Completed, ""),
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, _ := Check(Options{Retention: true}, tc.h, 10*time.Second, ""); r.Result != tc.want {
				t.Fatalf("%v, want %v", r, tc.want)
			}
		})
	}
}
