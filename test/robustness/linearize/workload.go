package linearize

import (
	"fmt"
	"math/rand/v2"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// TaskInputs is what a workload asked of one task: the keys of its input
// requests, so that its SetTaskInputs ask new ones (and now and then one
// asked before, which is refused) and its UpdateTasks answer some. Its
// user guards it.
type TaskInputs struct{ asked []string }

// Request asks a new input request of the task's call, withdrawing one
// asked before now and then.
func (t *TaskInputs) Request(r *rand.Rand, call *pb.CallRef) *pb.SetTaskInputRequest {
	k := fmt.Sprintf("k%d", len(t.asked))
	if n := len(t.asked); n > 0 && r.IntN(8) == 0 {
		k = t.asked[r.IntN(n)]
	} else {
		t.asked = append(t.asked, k)
	}
	req := &pb.SetTaskInputRequest{Call: call, Ask: []*pb.TaskInput{{Key: k, Seq: int64(len(t.asked)), Method: "elicitation/create",
		ParamsJson: []byte(`{"message":"go on?"}`)}}}
	if n := len(t.asked); n > 1 && r.IntN(3) == 0 {
		req.Withdraw = []string{t.asked[r.IntN(n)]}
	}
	return req
}

// Answers answers some of the requests asked, and one never asked.
func (t *TaskInputs) Answers(r *rand.Rand) map[string][]byte {
	out := map[string][]byte{"never-asked": []byte(`{}`)}
	for _, k := range t.asked {
		if r.IntN(2) == 0 {
			out[k] = []byte(`{"action":"accept"}`)
		}
	}
	return out
}
