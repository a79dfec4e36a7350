package gateway

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// Parked calls (docs/passthrough.md, "Multi round-trip"). A fronted
// server's tool runs once per call: when its handler asks a 2026-07-28
// client something, the worker says its requests are parkable, and the
// gateway, instead of letting the retry run the handler again, asks the
// worker to park the call (WorkerService.Park): the handler's work waits
// there, bounded, for the client's retry. The worker's name and the park
// id go into the sealed requestState, so the retry, at any replica, is
// placed on that worker alone (BeginRequest.pin_worker) and resumes the
// parked work (ExecuteRequest.resume) rather than running the tool anew.
// If the worker is gone, or the park expired, the client is told so and
// calls the tool afresh knowingly.

// errParkGone is what the client of a retry whose parked call is gone
// hears: its question expired, or its server session went with its
// worker.
const errParkGone = "the question this call answers expired, or the tool's server session is gone; call the tool again without requestState"

// parkable says whether the round's requests all come from a handler
// that waits for their answers rather than running again.
func (c *call) parkable() bool {
	pending := c.children.roundTrip.pending
	for _, in := range pending {
		if !in.parkable {
			return false
		}
	}
	return len(pending) > 0
}

// parkForRetry parks the call on its worker and answers it input_required
// with the park sealed in the state. A call that cannot be parked is
// answered with an error: its tool must not run again.
func (c *call) parkForRetry(wc pb.WorkerServiceClient, begun *pb.BeginResponse) {
	g := c.s.g
	ctx, cancel := context.WithTimeout(c.traced(g.base), cancelTimeout)
	got, err := wc.Park(ctx, &pb.ParkRequest{CallId: begun.GetCallId(), Scope: c.s.scope, Ttl: durationpb.New(g.opts.InputTimeout)})
	cancel()
	if err != nil {
		g.log.Warn("could not park a call for its client's retry", "scope", c.s.scope, "call", begun.GetCallId(), "worker", begun.GetWorker(), "err", err)
		c.setOutcome(outcomeFailed)
		c.respond(c.failure("the tool's question cannot wait for your answer: %s", status.Convert(err).Message()))
		c.sendCancel(&cancelOrder{who: pb.Initiator_INITIATOR_TOOL,
			reason: "the tool asked its client for input, but its worker could not park the call: " + status.Convert(err).Message()})
		return
	}
	for _, in := range c.children.roundTrip.pending {
		c.children.note(in.seq, "", "parked")
	}
	expires := time.Now().Add(g.opts.InputTimeout)
	if e := got.GetExpires(); e != nil && e.AsTime().Before(expires) {
		expires = e.AsTime()
	}
	answers := make(map[string]json.RawMessage, len(c.children.roundTrip.inputs))
	for k, v := range c.children.roundTrip.inputs {
		answers[k] = v
	}
	st := sealedState{Expires: expires.UnixNano(), Answers: answers, Worker: begun.GetWorker(), Park: got.GetParkId()}
	c.answerInputRequired(c.inputRequests(), st,
		"the call ended input_required (2026-07-28): the tool asked its client for input; it waits, parked on worker "+
			begun.GetWorker()+", for the client's retry with the answers")
}

// pinnedGone answers a retry whose parked call's worker is gone or no
// longer serves the tool; it reports whether it did.
func (c *call) pinnedGone(err error) bool {
	if c.children.roundTrip.pin == "" || client.Kind(err) != client.ErrNotRetryable {
		return false
	}
	c.setOutcome(outcomeRejected)
	c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: %s", errParkGone)))
	return true
}
