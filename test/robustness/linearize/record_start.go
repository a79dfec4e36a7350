package linearize

import (
	"context"
	"errors"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Start places a call with cl's Start and records it as one operation,
// from the invocation to the Begun message or the stream's error (see
// start.go). Between its placed message and reading Begun it calls
// placed, if the call runs beside its Begin (fence 0), so that the caller
// may decide the call by placement, or abandon the Begin, while the
// Begin is in flight. It returns the placed message (nil if none came),
// the Begun message (nil if none came: Begin-first, or an error) and the
// stream's error.
func (r *Recorder) Start(ctx context.Context, cl pb.CoordinatorServiceClient, req *pb.BeginRequest,
	placed func(*pb.BeginResponse)) (*pb.BeginResponse, *pb.Begun, error) {
	in := Input{Op: OpStart, Key: Key(req.GetKey()), BeginID: req.GetBeginId()}
	client, _ := ctx.Value(clientKey{}).(int)
	call := r.now()
	p, begun, err := r.startStream(ctx, cl, req, placed)
	ret := r.now()
	out := startOutput(p, begun, err)
	if out.Unknown {
		ret = pending
	}
	r.add(in, out, client, call, ret)
	return p, begun, err
}

func (r *Recorder) startStream(ctx context.Context, cl pb.CoordinatorServiceClient, req *pb.BeginRequest,
	placed func(*pb.BeginResponse)) (*pb.BeginResponse, *pb.Begun, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cl.Start(ctx, &pb.StartRequest{Begin: req})
	if err != nil {
		return nil, nil, err
	}
	m, err := st.Recv()
	if err != nil {
		return nil, nil, err
	}
	p := m.GetPlaced()
	if p == nil {
		return nil, nil, errors.New("linearize: Start's first message is not placed")
	}
	if p.GetFence() != 0 {
		return p, nil, nil // Begin-first: recorded already
	}
	r.placedBy(p.GetCallId(), Key(req.GetKey()), req.GetBeginId())
	if placed != nil {
		placed(p)
	}
	m, err = st.Recv()
	if err != nil {
		return p, nil, err
	}
	if m.GetBegun() == nil {
		return p, nil, errors.New("linearize: Start's second message is not begun")
	}
	return p, m.GetBegun(), nil
}

// placedBy notes the key and the Begin of a call placed by a Start, for
// the decisions that name it by placement.
func (r *Recorder) placedBy(id, key, beginID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owner[id] = key
	r.beginOf[id] = beginID
}

// startOutput maps what a Start got to the model's output. A Begin that
// found its worker gone wrote nothing (UNKNOWN_CALL): refused, as for
// no worker.
func startOutput(p *pb.BeginResponse, begun *pb.Begun, err error) Output {
	switch {
	case err != nil:
		out := errorOutput(Input{Op: OpBegin}, err)
		if out.Result == RNotFound {
			out.Result = RRefused
		}
		out.ID = p.GetCallId() // "" if no placed message came
		return out
	case begun.GetSettled():
		return Output{ID: p.GetCallId(), Result: RSettled}
	}
	return Output{ID: p.GetCallId()}
}

// namesPlacement says a call reference names its call by placement.
func namesPlacement(ref *pb.CallRef) bool {
	return ref.GetFence() == 0 && len(ref.GetPlacement()) > 0
}

// placedLocked fills in the key and the Begin of a decision by
// placement.
func (r *Recorder) placedLocked(in *Input) {
	if !in.Placed {
		return
	}
	in.Key, in.BeginID = r.owner[in.ID], r.beginOf[in.ID]
}
