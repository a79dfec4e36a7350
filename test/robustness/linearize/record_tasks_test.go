package linearize

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// TestRecorderTasks: the recorder keys a CreateTask by its task (one of
// unknown outcome by a partition of its own), leaves out a read of
// unknown outcome, projects a ListTasks on the tasks it listed and on
// those it left out of a full listing, and a CancelScope on a task it
// named; the task's call's own operations land in the task's partition.
func TestRecorderTasks(t *testing.T) {
	rec := NewRecorder()
	icpt := rec.Interceptor()
	do := func(req, reply proto.Message, err error) {
		t.Helper()
		invoker := func(_ context.Context, _ string, _, out any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			if err == nil {
				proto.Merge(out.(proto.Message), reply)
			}
			return err
		}
		icpt(context.Background(), "/m", req, reply.ProtoReflect().New().Interface(), nil, invoker)
	}
	unavailable := status.Error(codes.Unavailable, "gone")
	key := &pb.CallKey{Scope: "conn:a", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}
	task := func(id string, st pb.TaskStatus) *pb.Task { return &pb.Task{TaskId: id, Status: st} }

	do(&pb.CreateTaskRequest{Key: key, Principal: "alice"}, &pb.CreateTaskResponse{Task: task("a", pb.TaskStatus_TASK_STATUS_WORKING)}, nil)
	do(&pb.CreateTaskRequest{Key: key, Principal: "alice"}, &pb.CreateTaskResponse{}, unavailable)
	do(&pb.CreateTaskRequest{Key: key, Principal: "alice"}, &pb.CreateTaskResponse{Task: task("b", pb.TaskStatus_TASK_STATUS_WORKING)}, nil)
	do(&pb.GetTaskRequest{TaskId: "a", Principal: "alice"}, &pb.GetTaskResponse{}, unavailable)
	do(&pb.CompleteRequest{Call: &pb.CallRef{CallId: "a"}}, &pb.CompleteResponse{Result: pb.SettleResult_SETTLE_RESULT_WON}, nil)
	do(&pb.ListTasksRequest{Principal: "alice"}, &pb.ListTasksResponse{Tasks: []*pb.Task{task("a", pb.TaskStatus_TASK_STATUS_COMPLETED)}}, nil)
	do(&pb.CancelScopeRequest{Scope: "conn:a", Initiator: pb.Initiator_INITIATOR_DISCONNECT}, &pb.CancelScopeResponse{CallIds: []string{"b"}}, nil)

	h, err := rec.History(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range h {
		in, out := op.Input.(Input), op.Output.(Output)
		got = append(got, in.Key+" "+describeOperation(in, out))
	}
	want := []string{
		"task:a create_task as alice -> a",
		"task:?1 create_task as alice -> ?",
		"task:b create_task as alice -> b",
		"task:a complete(a) -> WON",
		"task:b cancel_scope by disconnect -> b",
		"task:a list_task(a) as alice -> completed",
		"task:b list_task(b) as alice -> NOT_FOUND",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("history:\n%q\nwant:\n%q", got, want)
	}
	// The scope's cancel of task b, and b left out of a full listing,
	// are each an anomaly.
	if r, _ := Check(Options{}, h, time.Minute, ""); r.Result != porcupine.Illegal || r.Tasks != 3 || r.TaskOperations != 7 {
		t.Fatalf("%v; want Illegal, 7 operations on 3 tasks", r)
	}
	if r, _ := Check(Options{}, slices.Delete(slices.Clone(h), 4, 5), time.Minute, ""); r.Result != porcupine.Illegal {
		t.Fatalf("without the scope's cancel: %v; want Illegal", r)
	}
	if r, _ := Check(Options{}, slices.Delete(slices.Delete(slices.Clone(h), 6, 7), 4, 5), time.Minute, ""); r.Result != porcupine.Ok {
		t.Fatalf("without either: %v; want Ok", r)
	}
}
