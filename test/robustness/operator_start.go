package robustness

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/test/robustness/linearize"
)

// startCall places a call with Start, as a gateway does (DESIGN section 4),
// and while its Begin is in flight decides it by placement or abandons
// it (beside), so that decisions race the Begin and some create the
// call's record. The call is kept for later operations: by fence once
// begun, else by placement (settled first, or the Begin's outcome
// unknown), which reaches the record if there is one and may create it
// if not.
// cur are this tree's coordinators, the only ones the decisions by
// placement go to.
func (op *operator) startCall(ctx context.Context, r *rand.Rand, cl pb.CoordinatorServiceClient, cur []pb.CoordinatorServiceClient, k *pb.CallKey) {
	mk := linearize.Key(k)
	req := op.beginRequest(k, "")
	req.BeginId = randid.New(16)
	op.mu.Lock()
	op.named[mk] = req.BeginId
	op.mu.Unlock()
	p, begun, err := op.rec.Start(ctx, cl, req, func(p *pb.BeginResponse) { op.beside(ctx, r, cur, k, req.BeginId, p) })
	if p == nil {
		if linearize.BeginOutcomeUnknown(err) {
			op.abandon(ctx, r, k, req.BeginId)
		}
		return
	}
	if begun != nil && !begun.GetSettled() {
		p = proto.CloneOf(p)
		p.Fence, p.Placement = begun.GetFence(), nil
	}
	op.mu.Lock()
	op.calls[mk] = append(op.calls[mk], p)
	op.mu.Unlock()
	if linearize.BeginOutcomeUnknown(err) && r.IntN(2) == 0 {
		op.abandon(ctx, r, k, req.BeginId)
	}
}

// beside is what the operator does between a Start's placed message
// and its Begun: nothing (a third of the time), one decision by
// placement, an AbandonBegin and then a decision, or two decisions at
// once through this tree's coordinators, cur (both, when both run it).
func (op *operator) beside(ctx context.Context, r *rand.Rand, cur []pb.CoordinatorServiceClient, k *pb.CallKey, beginID string, p *pb.BeginResponse) {
	ref := &pb.CallRef{CallId: p.GetCallId(), Worker: p.GetWorker(), Placement: p.GetPlacement()}
	switch x := r.IntN(6); {
	case x < 2:
	case x < 4:
		op.decide(ctx, cur[r.IntN(len(cur))], r.IntN(4), ref)
	case x < 5:
		op.clients[r.IntN(len(op.clients))].AbandonBegin(ctx, abandonRequest(k, beginID))
		op.decide(ctx, cur[r.IntN(len(cur))], r.IntN(4), ref)
	default:
		var wg sync.WaitGroup
		for i, kind := range []int{r.IntN(4), r.IntN(4)} {
			wg.Go(func() { op.decide(ctx, cur[i%len(cur)], kind, ref) })
		}
		wg.Wait()
	}
}

// decide makes one decision on ref's call: a completion, a failure as
// its worker lost or by its tool, or a cancellation.
func (op *operator) decide(ctx context.Context, cl pb.CoordinatorServiceClient, kind int, ref *pb.CallRef) {
	switch kind {
	case 0:
		cl.Complete(ctx, &pb.CompleteRequest{Call: ref})
	case 1:
		cl.Fail(ctx, &pb.FailRequest{Call: ref, Initiator: pb.Initiator_INITIATOR_WORKER_LOST})
	case 2:
		cl.Fail(ctx, &pb.FailRequest{Call: ref, Initiator: pb.Initiator_INITIATOR_TOOL})
	default:
		cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: ref}, Initiator: pb.Initiator_INITIATOR_TIMEOUT})
	}
}

// thisTree are the clients of coordinators idx.
func (op *operator) thisTree(idx []int) []pb.CoordinatorServiceClient {
	var out []pb.CoordinatorServiceClient
	for _, i := range idx {
		out = append(out, op.clients[i])
	}
	return out
}

// abandon abandons a Begin whose outcome is unknown, as a gateway
// does, trying each coordinator.
func (op *operator) abandon(ctx context.Context, r *rand.Rand, k *pb.CallKey, beginID string) {
	for try := range 3 {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		_, err := op.clients[(r.IntN(len(op.clients))+try)%len(op.clients)].AbandonBegin(actx, abandonRequest(k, beginID))
		cancel()
		if err == nil {
			return
		}
	}
}

// decidable says the operator may still decide b's call: by fence at
// any time; by placement, before the call's deadline, as its gateway
// (during its Start) and its worker (whose handler ends by then) do,
// unless late. Past it, the guards that keep a decision by placement
// from creating a record a second time (the record itself, on the
// retention lease) or for an abandoned Begin (abandoned/<begin id>, on
// Begin's lease) may have expired; -late-placement makes such decisions
// (the report of issue 34 item 7 says what they find).
func (op *operator) decidable(b *pb.BeginResponse) bool {
	return op.late || b.GetFence() != 0 || time.Now().Before(b.GetDeadline().AsTime())
}
