package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// A 2026-07-28 task waiting for its client's input. The task's worker
// records each request its call makes toward the client at the
// coordinator; tasks/get shows them as inputRequests while the task is
// input_required. The client answers with tasks/update, on any replica:
// the coordinator takes the answers of requests still outstanding out of
// the task in one transaction guarded like every decision, so that an
// update racing tasks/cancel or the task's end takes nothing once the
// task is terminal; this replica then delivers each answer taken to the
// worker with WorkerService.Answer, as for any request toward a client.
// The acknowledgement goes out after the transaction, so a tasks/get that
// follows no longer lists what was answered.

// answerRetries bounds the attempts to hand a taken answer to its worker.
const answerRetries = 5

// updateParams are tasks/update's params.
type updateParams struct {
	InputResponses json.RawMessage `json:"inputResponses"`
}

// updateTask answers tasks/update: an acknowledgement, once the answers
// the task waits on are taken and on their way to its worker.
func (s *session) updateTask(ctx context.Context, id string, params json.RawMessage) (any, *jsonrpc.Error) {
	if id == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "taskId is required")
	}
	answers, e := inputResponses(params)
	if e != nil {
		return nil, e
	}
	cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	got, err := s.g.coord.UpdateTask(cctx, &pb.UpdateTaskRequest{TaskId: id, Principal: s.principal, InputResponses: answers})
	if err != nil {
		if client.Is(err, client.ErrInvalidArgument) {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: inputResponses must map keys to result objects")
		}
		return nil, taskError(err, id)
	}
	if len(got.GetAccepted()) > 0 {
		s.deliverTaskAnswers(got, answers)
	}
	return map[string]any{}, nil
}

// inputResponses reads tasks/update's inputResponses: an object whose
// values are result objects.
func inputResponses(params json.RawMessage) (map[string][]byte, *jsonrpc.Error) {
	var p updateParams
	json.Unmarshal(params, &p)
	var in map[string]json.RawMessage
	if json.Unmarshal(p.InputResponses, &in) != nil || in == nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: tasks/update needs inputResponses, an object")
	}
	out := make(map[string][]byte, len(in))
	for k, v := range in {
		if len(v) == 0 || v[0] != '{' {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: inputResponses[%q] must be a result object", k)
		}
		out[k] = v
	}
	return out, nil
}

// deliverTaskAnswers hands the answers the coordinator took to the task's
// worker. They were taken once, so they are delivered here or nowhere: a
// worker that cannot be reached is retried a few times, and one that is
// lost fails the task through the coordinator's janitor.
func (s *session) deliverTaskAnswers(got *pb.UpdateTaskResponse, answers map[string][]byte) {
	wc, err := s.g.workerClient(got.GetWorkerAddress())
	if got.GetWorkerAddress() == "" || err != nil {
		s.g.log.Warn("cannot reach the worker of a task to deliver its client's answers", "task", got.GetCallId(), "err", err)
		return
	}
	for _, in := range got.GetAccepted() {
		req := &pb.AnswerRequest{CallId: got.GetCallId(), Scope: got.GetScope(), Seq: in.GetSeq(),
			Answer: &pb.AnswerRequest_ResultJson{ResultJson: answers[in.GetKey()]}}
		retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
		for range answerRetries {
			ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
			_, err = wc.Answer(ctx, req)
			cancel()
			if err == nil || retry.Wait(s.g.base) != nil {
				break
			}
		}
		if err != nil {
			s.g.log.Warn("could not deliver a task's answer to its worker", "task", got.GetCallId(), "key", in.GetKey(), "err", err)
		}
	}
}

// inputRequests is the extension's inputRequests of an input_required
// task: each request by its key.
func inputRequests(t *pb.Task) map[string]any {
	out := make(map[string]any, len(t.GetInputRequests()))
	for _, in := range t.GetInputRequests() {
		r := map[string]any{"method": in.GetMethod()}
		if p := in.GetParamsJson(); len(p) > 0 {
			r["params"] = json.RawMessage(p)
		}
		out[in.GetKey()] = r
	}
	return out
}
