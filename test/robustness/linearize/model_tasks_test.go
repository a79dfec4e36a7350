package linearize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const t1 = "t1" // a task id

// Hand-made task operations on task t1 of principal alice.

func createTask(call, ret int64) porcupine.Operation {
	return op(0, call, ret, Input{Op: OpCreateTask, Key: TaskKey(t1), Principal: "alice"}, Output{ID: t1})
}

// shown is a reply showing the task with status st.
func shown(st, initiator, inputs string) Output {
	return Output{State: st, Initiator: initiator, Inputs: inputs}
}

func taskOf(client int, call, ret int64, kind, principal string, out Output) porcupine.Operation {
	in := Input{Op: kind, Key: TaskKey(t1), ID: t1, Principal: principal}
	if kind == OpCancelTask {
		in.Initiator, in.Reason = TaskInitiator, TaskReason
	}
	return op(client, call, ret, in, out)
}

func getTask(client int, call, ret int64, out Output) porcupine.Operation {
	return taskOf(client, call, ret, OpGetTask, "alice", out)
}

func cancelTask(client int, call, ret int64, result string, task Output) porcupine.Operation {
	task.Result = result
	return taskOf(client, call, ret, OpCancelTask, "alice", task)
}

func completeTask(client int, call, ret int64, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpComplete, Key: TaskKey(t1), ID: t1}, Output{Result: result})
}

func failTask(client int, call, ret int64, initiator, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpFail, Key: TaskKey(t1), ID: t1, Initiator: initiator}, Output{Result: result})
}

func setInput(client int, call, ret int64, ask, withdraw, result string) porcupine.Operation {
	return op(client, call, ret, Input{Op: OpSetInput, Key: TaskKey(t1), ID: t1, Keys: ask, Withdraw: withdraw}, Output{Result: result})
}

func updateTask(client int, call, ret int64, answer, accepted string, task Output) porcupine.Operation {
	task.Accepted = accepted
	o := taskOf(client, call, ret, OpUpdateTask, "alice", task)
	in := o.Input.(Input)
	in.Keys = answer
	o.Input = in
	return o
}

var (
	working   = shown(Working, "", "")
	completed = shown(Completed, "", "")
	cancelled = shown(Cancelled, TaskInitiator, "")
	notFound  = Output{Result: RNotFound}
)

// TestModelAcceptsTaskHistories: task histories some order explains.
func TestModelAcceptsTaskHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		h    []porcupine.Operation
	}{
		{"cancel and completion overlap, the completion won", Options{}, []porcupine.Operation{
			createTask(0, 1), completeTask(1, 2, 6, RWon), cancelTask(2, 3, 5, RNotCancelled, completed), getTask(3, 7, 8, completed),
		}},
		{"cancel and completion overlap, the cancel won", Options{}, []porcupine.Operation{
			createTask(0, 1), completeTask(1, 2, 6, RAlreadyCancelled), cancelTask(2, 3, 5, RCancelled, cancelled), getTask(3, 7, 8, cancelled),
		}},
		{"a second cancel does not win, even the client's own", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, 3, RCancelled, cancelled), cancelTask(1, 4, 5, RNotCancelled, cancelled),
			failTask(2, 6, 7, WorkerLost, RAlreadyCancelled),
		}},
		{"a read during the cancel sees either status", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, 6, RCancelled, cancelled), getTask(2, 3, 4, working), getTask(3, 5, 7, cancelled),
		}},
		{"a cancel of unknown outcome that took effect", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, -1, "", Output{}), completeTask(2, 5, 6, RAlreadyCancelled), getTask(3, 7, 8, cancelled),
		}},
		{"a cancel of unknown outcome that did not", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, -1, "", Output{}), completeTask(2, 5, 6, RWon), getTask(3, 7, 8, completed),
		}},
		{"another principal finds nothing", Options{}, []porcupine.Operation{
			createTask(0, 1), taskOf(1, 2, 3, OpGetTask, "mallory", notFound), taskOf(1, 4, 5, OpCancelTask, "mallory", notFound), getTask(2, 6, 7, working),
		}},
		{"a task read before its CreateTask answered", Options{}, []porcupine.Operation{
			createTask(0, 5), getTask(1, 1, 2, notFound), getTask(1, 3, 4, working),
		}},
		{"input asked, read, answered", Options{}, []porcupine.Operation{
			createTask(0, 1), setInput(1, 2, 3, "k1,k2", "", ""), getTask(2, 4, 5, shown(InputRequired, "", "k1,k2")),
			updateTask(2, 6, 7, "k1,k9", "k1", shown(InputRequired, "", "k2")),
			setInput(1, 8, 9, "", "k2", ""), getTask(2, 10, 11, working),
			updateTask(2, 12, 13, "k2", "", working), setInput(1, 14, 15, "k1", "", RRefused),
			completeTask(1, 16, 17, RWon), setInput(1, 18, 19, "k3", "", RNotFound), updateTask(2, 20, 21, "k3", "", completed),
		}},
		{"an update racing the completion", Options{}, []porcupine.Operation{
			createTask(0, 1), setInput(1, 2, 3, "k1", "", ""), completeTask(1, 4, 8, RWon),
			updateTask(2, 5, 7, "k1", "k1", working), getTask(3, 9, 10, completed),
		}},
		{"a scope's cancel leaves the task alone", Options{}, []porcupine.Operation{
			createTask(0, 1), op(1, 2, 3, Input{Op: OpCancelScope, Key: TaskKey(t1), Initiator: "disconnect"}, Output{}), getTask(2, 4, 5, working),
		}},
		{"a wait returns the task as it ended", Options{}, []porcupine.Operation{
			createTask(0, 1), taskOf(1, 2, 9, OpWaitTask, "alice", shown(Failed, "tool", "")), failTask(2, 3, 4, "tool", RWon),
		}},
		{"a listing before the task was created, and after", Options{}, []porcupine.Operation{
			taskOf(1, 0, 1, OpListTask, "alice", notFound), createTask(2, 3), taskOf(1, 4, 5, OpListTask, "alice", working),
		}},
		{"a CreateTask of unknown outcome", Options{}, []porcupine.Operation{
			op(0, 0, -1, Input{Op: OpCreateTask, Key: TaskKey("?1"), Principal: "alice"}, Output{}),
		}},
		{"the janitor fails the task when its deadline passed", Options{Janitor: true}, []porcupine.Operation{
			createTask(0, 1), getTask(1, 2, 3, shown(Failed, "timeout", "")), completeTask(2, 4, 5, RAlreadyFailed),
		}},
		{"the task expires while its call runs on", Options{Retention: true}, []porcupine.Operation{
			createTask(0, 1), getTask(1, 2, 3, notFound), cancelTask(1, 4, 5, RNotFound, Output{}), completeTask(2, 6, 7, RWon),
			op(2, 8, 9, Input{Op: OpGetID, Key: TaskKey(t1), ID: t1}, Output{ID: t1, State: Completed}),
		}},
		{"a cancel of unknown outcome takes effect after the task was seen missing", Options{Retention: true}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, -1, "", Output{}), getTask(2, 3, 4, notFound),
			op(2, 5, 6, Input{Op: OpGetID, Key: TaskKey(t1), ID: t1}, Output{ID: t1, State: Running}),
			op(2, 7, 8, Input{Op: OpGetID, Key: TaskKey(t1), ID: t1}, Output{ID: t1, State: Cancelled}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(tc.o, tc.h, 10*time.Second, "")
			if err != nil || r.Result != porcupine.Ok {
				t.Fatalf("%v, %v; want Ok", r, err)
			}
		})
	}
}

// TestModelRejectsTaskAnomalies: task anomalies, each made by hand, are
// each rejected, and the visualisation is written.
func TestModelRejectsTaskAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		h    []porcupine.Operation
	}{
		{"a task read completed before its Complete was invoked", Options{}, []porcupine.Operation{
			createTask(0, 1), getTask(1, 2, 3, completed), completeTask(2, 4, 5, RWon),
		}},
		{"a cancel and a completion both won", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, 5, RCancelled, cancelled), completeTask(2, 3, 6, RWon),
		}},
		{"a task read cancelled, then working", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, 5, RCancelled, cancelled), getTask(2, 3, 4, cancelled), getTask(3, 6, 7, working),
		}},
		{"a cancel that did not win on a working task", Options{}, []porcupine.Operation{
			createTask(0, 1), cancelTask(1, 2, 3, RNotCancelled, working),
		}},
		{"a cancel that won on a completed task", Options{}, []porcupine.Operation{
			createTask(0, 1), completeTask(1, 2, 3, RWon), cancelTask(1, 4, 5, RCancelled, cancelled),
		}},
		{"a cancel that won on a completed task, reading it completed", Options{}, []porcupine.Operation{
			createTask(0, 1), completeTask(1, 2, 3, RWon), cancelTask(1, 4, 5, RCancelled, completed),
		}},
		{"a cancel's reply naming the wrong winner", Options{}, []porcupine.Operation{
			createTask(0, 1), failTask(1, 2, 3, WorkerLost, RWon), cancelTask(1, 4, 5, RNotCancelled, shown(Failed, "tool", "")),
		}},
		{"another principal reaches the task", Options{}, []porcupine.Operation{
			createTask(0, 1), taskOf(1, 2, 3, OpCancelTask, "mallory", cancelled),
		}},
		{"a task missing without retention", Options{}, []porcupine.Operation{
			createTask(0, 1), getTask(1, 2, 3, notFound),
		}},
		{"an expired task found again", Options{Retention: true}, []porcupine.Operation{
			createTask(0, 1), getTask(1, 2, 3, notFound), getTask(1, 4, 5, working),
		}},
		{"a task read before it was created", Options{}, []porcupine.Operation{
			getTask(1, 0, 1, working), createTask(2, 3),
		}},
		{"input asked but read working", Options{}, []porcupine.Operation{
			createTask(0, 1), setInput(1, 2, 3, "k1", "", ""), getTask(2, 4, 5, working),
		}},
		{"an update taking a request never asked", Options{}, []porcupine.Operation{
			createTask(0, 1), updateTask(2, 2, 3, "k1", "k1", working),
		}},
		{"an update taking a request twice", Options{}, []porcupine.Operation{
			createTask(0, 1), setInput(1, 2, 3, "k1", "", ""), updateTask(2, 4, 5, "k1", "k1", working), updateTask(2, 6, 7, "k1", "k1", working),
		}},
		{"a key asked again after its answer", Options{}, []porcupine.Operation{
			createTask(0, 1), setInput(1, 2, 3, "k1", "", ""), updateTask(2, 4, 5, "k1", "k1", working), setInput(1, 6, 7, "k1", "", ""),
		}},
		{"input asked of a terminal task", Options{}, []porcupine.Operation{
			createTask(0, 1), completeTask(1, 2, 3, RWon), setInput(1, 4, 5, "k1", "", ""),
		}},
		{"a scope's cancel cancelled a task", Options{}, []porcupine.Operation{
			createTask(0, 1), op(1, 2, 3, Input{Op: OpCancelScope, Key: TaskKey(t1), Initiator: "disconnect"}, Output{ID: t1}),
		}},
		{"a wait returned a working task", Options{}, []porcupine.Operation{
			createTask(0, 1), taskOf(1, 2, 3, OpWaitTask, "alice", working),
		}},
		{"a listing left out a created task", Options{}, []porcupine.Operation{
			createTask(0, 1), taskOf(1, 2, 3, OpListTask, "alice", notFound),
		}},
		{"the janitor does not undo a completion", Options{Janitor: true}, []porcupine.Operation{
			createTask(0, 1), completeTask(1, 2, 3, RWon), getTask(2, 4, 5, shown(Failed, "timeout", "")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			html := filepath.Join(t.TempDir(), "history.html")
			r, err := Check(tc.o, tc.h, 10*time.Second, html)
			if err != nil || r.Result != porcupine.Illegal {
				t.Fatalf("%v, %v; want Illegal", r, err)
			}
			if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), "<html") {
				t.Fatalf("no visualisation written: %v", err)
			}
		})
	}
}
