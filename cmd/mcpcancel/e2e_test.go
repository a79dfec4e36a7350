package main

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// TestCoordinatorAndWorker runs `mcpcancel coordinator` and
// `mcpcancel worker --demo` against an embedded etcd, calls echo through
// them, and stops both with SIGTERM, in either order.
func TestCoordinatorAndWorker(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workerFirst bool
	}{{"worker stops first", true}, {"coordinator stops first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			procs := coordinatorAndWorker(t)
			if !tc.workerFirst {
				slices.Reverse(procs)
			}
			for _, p := range procs {
				p.signal(t, syscall.SIGTERM)
				if code := p.exitCode(t); code != 0 {
					t.Errorf("%s exited %d after SIGTERM, want 0", p.cmd.Args[1], code)
				}
			}
		})
	}
}

// coordinatorAndWorker starts both, checks that echo works through them,
// and returns the worker and the coordinator.
func coordinatorAndWorker(t *testing.T) []*proc {
	coord, coordAddr := startCoordinator(t)
	wk := start(t, nil, "worker", "--coordinator", coordAddr, "--demo", "--name", "w1")
	workerAddr := wk.waitLine(t, "worker: ")

	conn := dialTest(t, coordAddr)
	waitServing(t, conn)
	client := pb.NewCoordinatorServiceClient(conn)
	waitForTools(t, client, "echo", "sleep", "spin")

	begin := beginCall(t, client, "echo", 1)
	if begin.GetWorker() != "w1" || begin.GetWorkerAddress() != workerAddr {
		t.Fatalf("Begin placed the call on %s at %s, want w1 at %s", begin.GetWorker(), begin.GetWorkerAddress(), workerAddr)
	}
	events := execute(t, begin, "echo", `{"text":"hi"}`)
	if len(events) != 1 || events[0].GetResult() == nil {
		t.Fatalf("want one result event, got %v", events)
	}
	if got := resultText(t, events[0].GetResult()); got != "hi" {
		t.Fatalf("echo result %q, want %q", got, "hi")
	}
	return []*proc{wk, coord}
}

// TestSecondSignalExitsAtOnce stops a worker that is draining a long call:
// the first SIGTERM starts the drain, the second ends the process with 130.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	_, coordAddr := startCoordinator(t)
	wk := start(t, nil, "worker", "--coordinator", coordAddr, "--demo", "--drain-timeout", "10m")
	wk.waitLine(t, "worker: ")
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	waitForTools(t, client, "sleep")

	stream := startExecute(t, beginCall(t, client, "sleep", 1), "sleep", `{"seconds":3600,"steps":10000}`)
	if e, err := stream.Recv(); err != nil || e.GetProgress() == nil {
		t.Fatalf("want progress from the running sleep, got %v, %v", e, err)
	}
	wk.signal(t, syscall.SIGTERM)
	wk.waitLine(t, "mcpcancel: terminated: shutting down")
	select {
	case <-wk.exited:
		t.Fatalf("worker exited (%v) on the first signal while a call was draining", wk.cmd.ProcessState)
	default:
	}
	wk.signal(t, syscall.SIGTERM)
	if code := wk.exitCode(t); code != 130 {
		t.Errorf("worker exited %d after a second SIGTERM, want 130", code)
	}
}

// TestFlagsFromEnvironment checks that MCPCANCEL_* variables set flags and
// that the command line wins over them.
func TestFlagsFromEnvironment(t *testing.T) {
	etcd := etcdtest.Single(t)
	// Port 0 rather than a picked free port, which another process could
	// bind first; any other port than the default's shows the variable won.
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want func(addr string) bool
	}{
		{"env only", []string{"MCPCANCEL_LISTEN=127.0.0.1:0", "MCPCANCEL_ETCD=" + etcd.Endpoints()[0]}, nil,
			func(addr string) bool {
				return strings.HasPrefix(addr, "127.0.0.1:") && addr != defaultCoordinator && addr != "127.0.0.1:0"
			}},
		{"command line wins", []string{"MCPCANCEL_LISTEN=not-an-address", "MCPCANCEL_ETCD=" + etcd.Endpoints()[0]}, []string{"--listen", "127.0.0.1:0"},
			func(addr string) bool { return strings.HasPrefix(addr, "127.0.0.1:") && addr != "127.0.0.1:0" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := start(t, tc.env, append([]string{"coordinator"}, tc.args...)...)
			addr := coord.waitLine(t, "coordinator: ")
			if !tc.want(addr) {
				t.Fatalf("listening on %q", addr)
			}
			waitServing(t, dialTest(t, addr)) // reached the etcd named only in the environment
			coord.signal(t, syscall.SIGINT)
			if code := coord.exitCode(t); code != 0 {
				t.Errorf("exited %d after SIGINT, want 0", code)
			}
		})
	}
}

// startCoordinator starts an embedded etcd and `mcpcancel coordinator` on
// it, and returns the coordinator and its address once it listens.
func startCoordinator(t *testing.T) (*proc, string) {
	t.Helper()
	etcd := etcdtest.Single(t)
	coord := start(t, nil, "coordinator", "--listen", "127.0.0.1:0", "--etcd", strings.Join(etcd.Endpoints(), ","))
	return coord, coord.waitLine(t, "coordinator: ")
}

func dialTest(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// poll calls check every 10ms until it returns true, failing after 20s.
func poll(t *testing.T, what string, check func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for !check() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// waitServing waits until the coordinator's gRPC health says SERVING.
func waitServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	health := healthgrpc.NewHealthClient(conn)
	poll(t, "coordinator SERVING", func() bool {
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

func waitForTools(t *testing.T, client pb.CoordinatorServiceClient, want ...string) {
	t.Helper()
	poll(t, "tools "+strings.Join(want, ", ")+" listed", func() bool {
		r, err := client.ListTools(t.Context(), &pb.ListToolsRequest{})
		if err != nil {
			return false
		}
		var names []string
		for _, tool := range r.GetTools() {
			names = append(names, tool.GetName())
		}
		return !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(names, w) })
	})
}

func beginCall(t *testing.T, client pb.CoordinatorServiceClient, tool string, id int64) *pb.BeginResponse {
	t.Helper()
	r, err := client.Begin(t.Context(), &pb.BeginRequest{
		Key:  &pb.CallKey{Scope: "conn:test", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: id}}},
		Tool: tool,
	})
	if err != nil {
		t.Fatalf("Begin %s: %v", tool, err)
	}
	return r
}

// startExecute opens the call's Execute stream on its worker, with
// progress on.
func startExecute(t *testing.T, b *pb.BeginResponse, tool, args string) pb.WorkerService_ExecuteClient {
	t.Helper()
	stream, err := pb.NewWorkerServiceClient(dialTest(t, b.GetWorkerAddress())).Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.GetCallId(), Fence: b.GetFence(), Tool: tool, ArgumentsJson: []byte(args), Progress: true,
	})
	if err != nil {
		t.Fatalf("Execute %s: %v", tool, err)
	}
	return stream
}

// execute runs the call to its end and returns every event.
func execute(t *testing.T, b *pb.BeginResponse, tool, args string) []*pb.ExecuteResponse {
	t.Helper()
	stream := startExecute(t, b, tool, args)
	var events []*pb.ExecuteResponse
	for {
		e, err := stream.Recv()
		if err == io.EOF {
			return events
		}
		if err != nil {
			t.Fatalf("Execute %s after %v: %v", tool, events, err)
		}
		events = append(events, e)
	}
}

// resultText is the text of a result with one text block.
func resultText(t *testing.T, r *pb.ExecuteResult) string {
	t.Helper()
	var res struct {
		Content []struct{ Type, Text string }
		IsError bool
	}
	if err := json.Unmarshal(r.GetResultJson(), &res); err != nil || len(res.Content) != 1 || res.IsError {
		t.Fatalf("result %s (%v), want one text block", r.GetResultJson(), err)
	}
	return res.Content[0].Text
}
