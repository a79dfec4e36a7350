package coordinator

// Start: a call begun beside its work (DESIGN section 4). The gateway
// learns where the call runs before its record is durable and sends
// Execute at once; the Begin goes through the group committer at the same
// moment. Nothing of the call is shown before its record is durable: the
// gateway holds progress until Start's Begun message or the call's
// decision, and a decision that comes before the Begin creates the record
// itself, already settled, under the Begin's guards (createTxn). The Begin
// then finds the record and writes nothing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// placement is a call as Start placed it, before its record is durable.
// Coordinators encode it (BeginResponse.placement); gateways and workers
// carry it back in their call references (CallRef.placement), so that any
// replica can create the record a decision needs.
type placement struct {
	Call      *callRecord `json:"call"`       // as begun
	Index     string      `json:"index"`      // its index key
	WorkerRev int64       `json:"worker_rev"` // the worker key's create revision it was placed under

	reuse  int64              // the index revision a created record replaces: 0, or a settled call's
	closed string             // the session was closed, for this reason: the record is the close's
	tried  func(created bool) // ends a claim on the call's lingering Begin (linger.go), once createTxn tried
}

// Start implements CoordinatorService.Start.
func (s *Server) Start(req *pb.StartRequest, stream pb.CoordinatorService_StartServer) error {
	return toStatus(s.start(stream.Context(), req.GetBegin(), stream.Send))
}

func (s *Server) start(ctx context.Context, req *pb.BeginRequest, send func(*pb.StartResponse) error) error {
	if err := validateBegin(req); err != nil {
		return err
	}
	switch {
	case req.GetBeginId() == "":
		return invalid("start needs a begin_id")
	case req.GetRetryOf() != "":
		return invalid("a retry is placed with Begin, not Start")
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	rec := s.newRecord(ctx, req)
	w, err := s.pick(ctx, rec, "", req.GetPinWorker())
	if err != nil {
		return err
	}
	if !runsBeside(w, rec) {
		s.metrics.starts.WithLabelValues("begin_first").Inc()
		resp, err := s.begin(ctx, req)
		if err != nil {
			return err
		}
		return send(&pb.StartResponse{Event: &pb.StartResponse_Placed{Placed: resp}})
	}
	s.metrics.starts.WithLabelValues("beside").Inc()
	rec.CallID, rec.Worker = randid.New(16), w.name
	pl := &placement{Call: rec, Index: s.keys.index(req.GetKey()), WorkerRev: w.createRev}
	encoded := []byte(encode(pl))
	p := s.placed.add(pl, encoded)
	s.view.addOwner(w.name, rec.CallID) // it counts toward its worker's load from now
	tracePlacement(ctx, rec)
	// Once the placement is out the Begin goes on, whether or not the
	// gateway stays to hear of it: its Execute may be running. A gateway
	// that loses the stream decides the call by its placement instead.
	ctx = context.WithoutCancel(ctx)
	sendErr := send(&pb.StartResponse{Event: &pb.StartResponse_Placed{Placed: placedReply(rec, w, 0, encoded)}})
	var fence int64
	settled := p.linger(s.lingerFor(rec), s.opts.OpTimeout) // linger.go
	if !settled {
		fence, settled, err = s.beginPlaced(ctx, pl, w)
	}
	s.placed.resolve(rec.CallID, p, fence, settled, err)
	if err != nil || settled {
		// Not running here: a settled call's owner key, if any, comes
		// back through the owners/ watch.
		s.view.removeOwner(w.name, rec.CallID)
	}
	if err != nil {
		return err
	}
	if !settled {
		s.running.add(rec, pl.Index, fence)
	}
	if sendErr != nil {
		return sendErr
	}
	return send(&pb.StartResponse{Event: &pb.StartResponse_Begun{Begun: &pb.Begun{Fence: fence, Settled: settled}}})
}

// runsBeside says whether rec may run before its record is durable: its
// worker takes such calls and the tool does not ask for its record first.
func runsBeside(w *workerEntry, rec *callRecord) bool {
	// Compat(v0.2): v0.1 workers (and workers attached to a v0.1
	// coordinator, which does not store the feature) need the fence;
	// drop in v0.3, with Features.runs_placed.
	if w.info.Features == nil || !w.info.Features.RunsPlaced {
		return false
	}
	if rec.Method == "" {
		if t := w.tools[rec.Tool]; t != nil && t.DurableBegin {
			return false
		}
	}
	return true
}

// beginPlaced writes a placed call's record. Unlike Begin it cannot move
// the call to another worker: the call runs where it was placed.
func (s *Server) beginPlaced(ctx context.Context, pl *placement, w *workerEntry) (fence int64, settled bool, err error) {
	var reuse int64
	for range 3 {
		fence, settled, err = s.beginTxn(ctx, pl.Call, pl.Index, w, reuse)
		var taken *indexTaken
		if !errors.As(err, &taken) {
			break
		}
		if reuse, err = s.reusable(ctx, taken.kv); err != nil {
			break
		}
	}
	if errors.Is(err, errWorkerGone) {
		// Begin-first would pick another worker; beside, the gateway
		// fails the call as lost with its worker and places it again
		// (UNKNOWN_CALL), on a worker other than this one.
		s.view.forgetWorker(w.name, w.createRev)
		err = fmt.Errorf("%w: its worker %s left before the call's record was written", ErrUnknownCall, w.name)
	}
	return fence, settled, err
}

// placedCalls are the calls this replica placed whose Begin has not
// answered yet. A decision for one waits for its Begin here rather than
// race it through etcd, where the loser's Txn would be wasted.
type placedCalls struct {
	mu sync.Mutex
	m  map[string]*placedBegin
}

type placedBegin struct {
	pl      *placement    // as Start made it; read only
	encoded []byte        // pl as Start sent it
	done    chan struct{} // closed once the fields below are set
	fence   int64
	settled bool
	err     error

	// While the Begin lingers a decision may claim the call and write its
	// record first (linger.go).
	mu      sync.Mutex
	sent    bool          // the Begin has gone to etcd: decisions wait for done
	claim   chan struct{} // set by a claim; closed once its decision tried
	created bool          // the claiming decision created the record
	claimed chan struct{} // closed by a claim
}

func (p *placedCalls) add(pl *placement, encoded []byte) *placedBegin {
	b := &placedBegin{pl: pl, encoded: encoded, done: make(chan struct{}), claimed: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*placedBegin{}
	}
	p.m[pl.Call.CallID] = b
	return b
}

// placement is a copy of the call's placement, for one decision: the
// decision may change its own copy (createTxn), never another's.
func (b *placedBegin) placement() *placement {
	pl, rec := *b.pl, *b.pl.Call
	pl.Call = &rec
	return &pl
}

func (p *placedCalls) get(id string) *placedBegin {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}

func (p *placedCalls) resolve(id string, b *placedBegin, fence int64, settled bool, err error) {
	b.fence, b.settled, b.err = fence, settled, err
	close(b.done)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, id)
}

// placedCall finds the call a reference with a placement names: its
// record if it has one, else the call as placed with a nil kv, for a
// decision to create (settle, createTxn).
func (s *Server) placedCall(ctx context.Context, ref *pb.CallRef) (*callRecord, *mvccpb.KeyValue, error) {
	b := s.placed.get(ref.GetCallId())
	var pl *placement
	if b != nil && bytes.Equal(ref.GetPlacement(), b.encoded) {
		pl = b.placement() // this replica's own, as it sent it: no need to decode it
	} else {
		var err error
		if pl, err = decode[placement]("placement", ref.GetPlacement()); err != nil {
			return nil, nil, invalid("the call reference's placement is not one a coordinator made")
		}
	}
	if pl.Call == nil || pl.Call.CallID != ref.GetCallId() || pl.Call.Worker != ref.GetWorker() || pl.Index == "" {
		return nil, nil, invalid("the call reference's placement names another call")
	}
	if b != nil {
		if tried := b.claimFirst(); tried != nil { // its Begin lingers: record the call ourselves
			// Unread: the Begin has not gone, so only another replica's
			// decision can have written the record, and createTxn's
			// guard finds it (and a request id's index taken).
			rec, err := s.asPlaced(pl)
			if err != nil {
				tried(false)
				return nil, nil, err
			}
			rec.placed.tried = tried
			return rec, nil, nil
		}
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, nil, etcdErr(ctx, "wait for the call's begin", ctx.Err())
		}
		if b.err == nil && !b.settled {
			rec := pl.Call
			return rec, &mvccpb.KeyValue{Key: []byte(s.keys.call(rec.CallID)), CreateRevision: b.fence, ModRevision: b.fence}, nil
		}
		// Settled first, or the Begin failed (perhaps after committing):
		// etcd says which, and the guards of a created record keep out a
		// call whose Begin could not have committed.
	}
	if c, ok := s.running.byCallID(ref.GetCallId()); ok && c.rec.Worker == ref.GetWorker() {
		return c.rec, c.kv(s.keys), nil
	}
	return s.unrecordedCall(ctx, ref, pl)
}

// unrecordedCall reads a placed call's record, if it has one, else
// returns the call as placed, with a nil kv, for a decision to create.
func (s *Server) unrecordedCall(ctx context.Context, ref *pb.CallRef, pl *placement) (*callRecord, *mvccpb.KeyValue, error) {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Txn(octx).Then(clientv3.OpGet(s.keys.call(pl.Call.CallID)), clientv3.OpGet(pl.Index)).Commit()
	cancel()
	if err != nil {
		return nil, nil, etcdErr(octx, "read a placed call", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		rec, err := decode[callRecord]("call", kvs[0].Value)
		if err != nil {
			return nil, nil, err
		}
		if rec.Worker != ref.GetWorker() || rec.BeginID != pl.Call.BeginID {
			return nil, nil, fmt.Errorf("%w: call %s runs on %s", ErrNotOwner, rec.CallID, rec.Worker)
		}
		return rec, kvs[0], nil
	}
	rec, err := s.asPlaced(pl)
	if err != nil {
		return nil, nil, err
	}
	if ikv := resp.Responses[1].GetResponseRange().Kvs; len(ikv) > 0 {
		if pl.reuse, err = s.reusable(ctx, ikv[0]); err != nil {
			return nil, nil, err
		}
	}
	return rec, nil, nil
}

// asPlaced is a placed call with no record, as a decision creates it.
func (s *Server) asPlaced(pl *placement) (*callRecord, error) {
	// A record is created only while the call could still be running: a
	// decision that comes later (a worker's settle retried past its
	// deadline on a half-dead link, found by the robustness soak) would
	// outlive what guards the creation (the abandonment's lease, the
	// record's own retention) and could record the call again.
	if s.now().After(pl.Call.Deadline.Add(s.opts.LeaseTTL)) {
		return nil, fmt.Errorf("%w: call %s has no record and is past its deadline", ErrUnknownCall, pl.Call.CallID)
	}
	rec := *pl.Call
	rec.placed = pl
	return &rec, nil
}

// errCreateAgain says a created record's guard found the request id's
// index changed, or the session closed; the decision is made again.
var errCreateAgain = errors.New("coordinator: create the record again")

// createTxn decides a placed call that has no record yet: it creates the
// record already settled, with its index and audit record, under the
// guards the Begin would have met (the call and the request id free, the
// Begin not abandoned, and, for a completion, the worker still the one it
// was placed on). It returns nil if it won, else the call's record,
// written meanwhile.
//
// A call whose session was closed while it ran before its record (a 2025
// session deleted, say) is recorded as the close would have decided it
// had it been begun: cancelled by the disconnect, whatever d says; d
// then loses to that.
func (s *Server) createTxn(ctx context.Context, rec *callRecord, d decision) (*mvccpb.KeyValue, error) {
	pl := rec.placed
	created := false
	if pl.tried != nil {
		// A lingering Begin goes now, or, if this created the record
		// settled, answers so without going to etcd.
		defer func() { pl.tried(created) }()
	}
	if pl.closed != "" {
		d = decision{state: stateCancelled, initiator: InitiatorName(pb.Initiator_INITIATOR_DISCONNECT), reason: pl.closed, children: d.children}
	}
	lease, err := s.retention.lease(ctx)
	if err != nil {
		return nil, err
	}
	// No stop order: a record created settled was never running, so no
	// watch of its owner key would clear one, and a worker gone by now
	// would leave it for good. Whoever decides without the worker stops
	// it otherwise: the gateway closes the call's Execute stream.
	d.ownerGone = d.ownerGone || d.stoppedAt == nil
	ck := s.keys.call(rec.CallID)
	abandoned, closed, wk := s.keys.abandoned(rec.BeginID), s.keys.sessionClosed(rec.Scope), s.keys.worker(rec.Worker)
	st := s.decide(rec, &mvccpb.KeyValue{Key: []byte(ck)}, d, s.now(), lease)
	next, ops := st.next, st.ops
	guards := []clientv3.Cmp{
		st.guard, // the call key's absence
		clientv3.Compare(clientv3.ModRevision(pl.Index), "=", pl.reuse),
		clientv3.Compare(clientv3.CreateRevision(abandoned), "=", 0),
	}
	if pl.closed == "" {
		guards = append(guards, clientv3.Compare(clientv3.CreateRevision(closed), "=", 0))
	}
	if d.state == stateCompleted {
		guards = append(guards, clientv3.Compare(clientv3.CreateRevision(wk), "=", pl.WorkerRev))
	}
	// The index holds the record as settled: a cancel resolved through it
	// finds the call decided, never running at the index's revision.
	ops = append(ops, clientv3.OpPut(pl.Index, string(ops[0].ValueBytes()), clientv3.WithLease(lease))) // next, as decide encoded it for the call key
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.commits.Txn(octx).If(guards...).Then(ops...).Else(
		clientv3.OpGet(ck),
		clientv3.OpGet(pl.Index),
		clientv3.OpGet(abandoned, clientv3.WithKeysOnly()),
		clientv3.OpGet(closed),
		clientv3.OpGet(wk, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.retention.forget(lease)
		}
		return nil, etcdErr(octx, "settle a placed call", err)
	}
	if resp.Succeeded {
		created = true
		s.metrics.decided(d.state, d.initiator, 1)
		s.metrics.createdSettled.Inc()
		if pl.closed != "" { // the close's decision, not the caller's
			rev := resp.Header.Revision
			return &mvccpb.KeyValue{Key: []byte(ck), Value: []byte(encode(next)), CreateRevision: rev, ModRevision: rev}, nil
		}
		return nil, nil
	}
	got := func(i int) []*mvccpb.KeyValue { return resp.Responses[i].GetResponseRange().Kvs }
	switch {
	case len(got(0)) > 0:
		return got(0)[0], nil
	case len(got(2)) > 0:
		return nil, fmt.Errorf("%w: call %s: its Begin was abandoned", ErrUnknownCall, rec.CallID)
	case len(got(3)) > 0:
		pl.closed = string(got(3)[0].Value)
		if pl.closed == "" {
			pl.closed = "session closed" // a tombstone that names no reason
		}
		return nil, errCreateAgain
	case d.state == stateCompleted && (len(got(4)) == 0 || got(4)[0].CreateRevision != pl.WorkerRev):
		return nil, fmt.Errorf("%w: its worker %s left before call %s was recorded", ErrUnknownCall, rec.Worker, rec.CallID)
	}
	if ikv := got(1); len(ikv) > 0 {
		if pl.reuse, err = s.reusable(ctx, ikv[0]); err != nil {
			return nil, err
		}
	} else {
		pl.reuse = 0
	}
	return nil, errCreateAgain
}

// maxRecordWaits bounds the cancels waiting at once for a record that may
// be on its way; past it, a cancel that finds no call is answered unknown
// at once, as before calls were begun beside their work.
const maxRecordWaits = 256

// awaitAnswerMargin is the time awaitRecord leaves before its caller's
// deadline to settle the call whose record appeared, or to answer unknown.
const awaitAnswerMargin = time.Second

// awaitRecord waits for the record of the call under key to appear, for
// a client's cancel that reached this replica before it: a call begun
// beside its work runs before its record is durable, and its client may
// cancel it through another replica meanwhile (a 2025-era HTTP session
// spans replicas). It waits with a watch, never a write, at most the time
// a Begin may take to commit, and reports whether the record appeared.
// A bogus cancel costs this wait and one read. The wait ends early enough
// to answer before the caller's deadline (awaitAnswerMargin): a cancel
// its caller gave up on is sent again, and waits again.
func (s *Server) awaitRecord(ctx context.Context, key *pb.CallKey) bool {
	select {
	case s.recordWaits <- struct{}{}:
		defer func() { <-s.recordWaits }()
	default:
		return false
	}
	idx := s.keys.index(key)
	wait := s.opts.OpTimeout
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)-awaitAnswerMargin)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := s.cli.Get(ctx, idx, clientv3.WithKeysOnly())
	if err != nil {
		return false
	}
	if len(resp.Kvs) > 0 {
		return true
	}
	for wr := range s.cli.Watch(clientv3.WithRequireLeader(ctx), idx, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterDelete()) {
		if wr.Err() != nil {
			return false
		}
		if len(wr.Events) > 0 {
			return true
		}
	}
	return false
}
