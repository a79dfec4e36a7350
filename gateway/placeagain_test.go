package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// A call started beside its Begin on a worker whose registration goes
// before the call's record is written has no record: the Begin is
// guarded on that registration. Begin-first, the coordinator would pick
// another worker; beside, the gateway fails the call as lost with its
// worker and places it again, and the client gets its result, not
// "could not be started" (seen in the fault harness, where a worker
// killed in that window failed its calls so). The Begin lingers
// (BeginLinger) so that w1's registration goes before the Begin does;
// w1 itself runs on, unaware, as a worker cut off from etcd would.
func TestCallWhoseWorkerLeftBeforeItsRecordIsPlacedAgain(t *testing.T) {
	st := newStack(t, stackOptions{coord: coordinator.Options{BeginLinger: time.Second}})
	sid := openSession(t, st.urls[0])
	r := loseWorkerBeforeRecord(t, st, st.urls[0], sid)
	if !hasResponse(r.msgs) || strings.Contains(fmt.Sprint(r.msgs), "error") || strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the client got %v, want the call's result", r.msgs)
	}
	as := st.audits(t, "session:"+sid)["1"]
	var lost, done *coordinator.AuditRecord
	for _, a := range as {
		t.Logf("decision: %+v", *a)
		switch {
		case a.Worker == "w1" && a.Outcome == "failed" && a.Initiator == "worker_lost" && a.RetryOf == "":
			lost = a
		case a.Worker == "w2" && a.Outcome == "completed":
			done = a
		}
	}
	if len(as) != 2 || lost == nil || done == nil || done.RetryOf != lost.CallID {
		t.Fatalf("want two decisions: the call on w1 failed as its worker lost, and its retry on w2 completed")
	}
}

// The same, where the lost call's failure reaches a coordinator that
// cannot record it: one of release v0.1, which knows no decision by
// placement (the call reference's placement is a field it drops) and
// finds no such call. Nothing recorded the call, so the client is told
// it could not be started, as when a Begin fails, and not that it was
// lost: a call anyone saw has a record (the fault harness's soak caught
// "the worker running this call was lost" with no record, in a fleet
// whose coordinators ran both releases).
func TestUnrecordedLostCallIsNotStartedWhenItsFailureCannotBeRecorded(t *testing.T) {
	st := newStack(t, stackOptions{coord: coordinator.Options{BeginLinger: time.Second}})
	_, url := testcluster.StartGateway(t, v01Fail{st.conn}, gateway.Options{})
	sid := openSession(t, url)
	r := loseWorkerBeforeRecord(t, st, url, sid)
	if !strings.Contains(fmt.Sprint(r.msgs), "could not be started") {
		t.Fatalf("the client got %v, want: the call could not be started", r.msgs)
	}
	if as := st.audits(t, "session:"+sid)["1"]; len(as) != 0 {
		t.Fatalf("the call has %d decisions, want none: nothing could record it", len(as))
	}
}

// v01Fail is a coordinator as one of release v0.1 takes a Fail: the call
// reference's placement, a field v0.1 does not know, is dropped.
type v01Fail struct{ grpc.ClientConnInterface }

func (c v01Fail) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if r, ok := args.(*pb.FailRequest); ok {
		r = proto.Clone(r).(*pb.FailRequest)
		r.Call.Placement = nil
		args = r
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// loseWorkerBeforeRecord starts a call on w1 through the gateway at url,
// while its Begin lingers, then starts w2 and removes w1's registration
// before the Begin commits; it returns the client's answer.
func loseWorkerBeforeRecord(t *testing.T, st *stack, url, sid string) streamResult {
	t.Helper()
	call := startCall(t, url, sid, 1, "sleep", map[string]any{"seconds": 3, "steps": 3}, nil)
	waitFor(t, "the call placed on w1", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "w2"}, demo.Register)
	deleteRegistration(t, st.cli, "w1")
	select {
	case r := <-call:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the call got no answer")
		return streamResult{}
	}
}

// deleteRegistration removes a worker's registration from etcd, as its
// lease's expiry would, while the worker runs on: it is gone to every
// coordinator.
func deleteRegistration(t *testing.T, cli *clientv3.Client, name string) {
	t.Helper()
	resp, err := cli.Delete(t.Context(), "/mcpcancel/v1/workers/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != 1 {
		t.Fatalf("no registration of worker %s in etcd", name)
	}
}
