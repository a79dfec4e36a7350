package coordinator_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig/testpki"
)

// adminClient serves the AdminService of e's first replica on its own
// loopback listener and dials it.
func adminClient(t *testing.T, e *env) pb.AdminServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := testcluster.GRPCServer()
	pb.RegisterAdminServiceServer(gs, coordinator.NewAdmin(e.coords[0].Server))
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return pb.NewAdminServiceClient(testcluster.Conn(t, lis.Addr().String()))
}

// TestListCallsShowsWhatRuns lists a running call with who runs it where
// and, once its worker's next heartbeat carried it, the progress its
// handler reported; finds it by id prefix, and forgets it once it
// completed.
func TestListCallsShowsWhatRuns(t *testing.T) {
	e := newEnv(t, envOptions{})
	admin := adminClient(t, e)
	b := e.begin(t, e.c, key("conn:1", num(7)), "hold")
	stream := e.execute(t, b, "hold", `{}`)
	h := e.hold.next(t)

	resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Calls) != 1 {
		t.Fatalf("ListCalls: %d calls, want 1", len(resp.Calls))
	}
	rc := resp.Calls[0]
	c := rc.GetCall()
	if c.GetCallId() != b.CallId || c.GetPrincipal() != "alice" || c.GetTool() != "hold" || c.GetWorker() != "w1" || c.GetGateway() != "g1" || rc.GetMethod() != "tools/call" {
		t.Errorf("ListCalls: %v, want call %s by alice of hold on w1 via g1", rc, b.CallId)
	}
	if rc.GetAge().AsDuration() <= 0 {
		t.Errorf("age %v, want a positive age", rc.GetAge().AsDuration())
	}
	// The hold tool reports 1/2 "holding" as it starts.
	var withProgress *pb.RunningCall
	testcluster.WaitFor(t, "the call's progress to be listed", func() bool {
		resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{})
		if err != nil || len(resp.Calls) != 1 || resp.Calls[0].GetLastProgress() == nil {
			return false
		}
		withProgress = resp.Calls[0]
		return true
	})
	if p := withProgress; p.GetProgress() != 1 || p.GetTotal() != 2 || p.GetProgressMessage() != "holding" ||
		p.GetLastProgress().AsTime().Before(c.GetRequestedAt().AsTime().Add(-time.Second)) || p.GetLastProgress().AsTime().After(time.Now()) {
		t.Errorf("progress %v/%v %q at %v, want 1/2 \"holding\" after the call was requested at %v",
			p.GetProgress(), p.GetTotal(), p.GetProgressMessage(), p.GetLastProgress().AsTime(), c.GetRequestedAt().AsTime())
	}
	for _, tc := range []struct {
		prefix string
		want   int
	}{{b.CallId[:6], 1}, {otherPrefix(b.CallId), 0}} {
		resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{CallIdPrefix: tc.prefix})
		if err != nil || len(resp.Calls) != tc.want {
			t.Errorf("ListCalls(prefix %q): %v, %v; want %d calls", tc.prefix, resp, err, tc.want)
		}
	}
	if _, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{CallIdPrefix: "XYZ"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ListCalls(prefix XYZ): %v, want InvalidArgument", err)
	}

	h.release <- nil
	stream.final(t)
	testcluster.WaitFor(t, "the completed call to leave the listing", func() bool {
		resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{})
		return err == nil && len(resp.Calls) == 0
	})
}

func otherPrefix(id string) string {
	if id[0] == '0' {
		return "1"
	}
	return "0"
}

// TestOperatorCancelIsAuditedAndWatched watches the calls, sees a call
// start, cancels it as an operator, sees it settle, and finds the decision
// audited with initiator operator and the operator named; a second cancel
// learns that the first won.
func TestOperatorCancelIsAuditedAndWatched(t *testing.T) {
	e := newEnv(t, envOptions{})
	admin := adminClient(t, e)
	watch, err := admin.WatchCalls(t.Context(), &pb.WatchCallsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := recvCall(t, watch); ev.GetEvent() != pb.CallEvent_CALL_EVENT_SYNCED {
		t.Fatalf("first event %v, want SYNCED (nothing runs)", ev)
	}
	b := e.begin(t, e.c, key("conn:1", num(1)), "hold")
	stream := e.execute(t, b, "hold", `{}`)
	h := e.hold.next(t)
	if ev := recvCall(t, watch); ev.GetEvent() != pb.CallEvent_CALL_EVENT_RUNNING || ev.GetCall().GetCall().GetCallId() != b.CallId {
		t.Fatalf("event %v, want RUNNING %s", ev, b.CallId)
	}

	resp, err := admin.OperatorCancel(t.Context(), &pb.OperatorCancelRequest{CallId: b.CallId, Reason: "stuck", OnBehalfOf: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	wantReason := "cancelled by operator ops@example.com (unverified: no client certificate): stuck"
	if resp.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED || resp.Reason != wantReason {
		t.Fatalf("OperatorCancel: %v, want CANCELLED with reason %q", resp, wantReason)
	}
	ev := recvCall(t, watch)
	if ev.GetEvent() != pb.CallEvent_CALL_EVENT_SETTLED || ev.GetCall().GetCall().GetState() != pb.CallState_CALL_STATE_CANCELLED ||
		ev.GetCall().GetCall().GetInitiator() != pb.Initiator_INITIATOR_OPERATOR {
		t.Fatalf("event %v, want SETTLED, cancelled by the operator", ev)
	}
	waitDone(t, h)
	if end := stream.final(t); end.GetCancelled().GetInitiator() != pb.Initiator_INITIATOR_OPERATOR {
		t.Errorf("execute ended %v, want cancelled by the operator", end)
	}
	as := e.audits(t, b.CallId)
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "operator" || as[0].Reason != wantReason || as[0].Principal != "alice" {
		t.Fatalf("audit %+v, want one cancelled record, initiator operator, reason %q, principal alice", as, wantReason)
	}

	again, err := admin.OperatorCancel(t.Context(), &pb.OperatorCancelRequest{CallId: b.CallId})
	if err != nil {
		t.Fatal(err)
	}
	if again.Result != pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED || again.WinnerInitiator != pb.Initiator_INITIATOR_OPERATOR {
		t.Errorf("second OperatorCancel: %v, want ALREADY_CANCELLED by the operator", again)
	}
	if n := len(e.audits(t, b.CallId)); n != 1 {
		t.Errorf("%d audit records after the second cancel, want still 1", n)
	}
}

// TestOperatorCancelRefusesBadIDs: a short id is refused with a hint, an
// unknown one is NotFound.
func TestOperatorCancelRefusesBadIDs(t *testing.T) {
	e := newEnv(t, envOptions{})
	admin := adminClient(t, e)
	for _, tc := range []struct {
		id   string
		code codes.Code
	}{{"abc", codes.InvalidArgument}, {strings.Repeat("0", 32), codes.NotFound}} {
		_, err := admin.OperatorCancel(t.Context(), &pb.OperatorCancelRequest{CallId: tc.id})
		if status.Code(err) != tc.code {
			t.Errorf("OperatorCancel(%q): %v, want %v", tc.id, err, tc.code)
		}
	}
}

func recvCall(t *testing.T, w pb.AdminService_WatchCallsClient) *pb.WatchCallsResponse {
	t.Helper()
	type got struct {
		m   *pb.WatchCallsResponse
		err error
	}
	ch := make(chan got, 1)
	go func() { m, err := w.Recv(); ch <- got{m, err} }()
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatalf("watch calls: %v", g.err)
		}
		return g.m
	case <-time.After(10 * time.Second):
		t.Fatal("no call event within 10s")
		return nil
	}
}

// TestOperatorRoleOverMTLS serves AdminService under the coordinator's
// role policy: an admin lists running calls but may not cancel them; an
// operator cancels, and the audit names the operator's certificate.
func TestOperatorRoleOverMTLS(t *testing.T) {
	e := newEnv(t, envOptions{})
	ca := testpki.NewCA(t, "mcpcancel")
	src := loadTLS(t, ca.Issue(t, tlsconfig.RoleCoordinator, "coord"))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := testcluster.GRPCServer(append([]grpc.ServerOption{src.ServerOption()}, authz.Coordinator().ServerOptions()...)...)
	pb.RegisterAdminServiceServer(gs, coordinator.NewAdmin(e.coords[0].Server))
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	as := func(role, name string) pb.AdminServiceClient {
		conn, err := dial.New(lis.Addr().String(), loadTLS(t, ca.Issue(t, role, name)).DialOption(tlsconfig.RoleCoordinator))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewAdminServiceClient(conn)
	}
	admin, operator := as(tlsconfig.RoleAdmin, "auditor"), as(tlsconfig.RoleOperator, "olga")

	b := e.begin(t, e.c, key("conn:1", num(1)), "hold")
	e.execute(t, b, "hold", `{}`)
	h := e.hold.next(t)
	if resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{}); err != nil || len(resp.Calls) != 1 {
		t.Fatalf("an admin listing calls: %v, %v", resp, err)
	}
	if _, err := admin.OperatorCancel(t.Context(), &pb.OperatorCancelRequest{CallId: b.CallId}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an admin cancelling: %v, want PermissionDenied", err)
	}
	resp, err := operator.OperatorCancel(t.Context(), &pb.OperatorCancelRequest{CallId: b.CallId, Reason: "runaway"})
	if err != nil || resp.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("an operator cancelling: %v, %v", resp, err)
	}
	waitDone(t, h)
	if got := e.audits(t, b.CallId); len(got) != 1 || got[0].Reason != "cancelled by operator olga: runaway" {
		t.Fatalf("audit %+v, want the reason to name operator olga", got)
	}
}

func loadTLS(t *testing.T, f testpki.Files) *tlsconfig.Source {
	t.Helper()
	src, err := tlsconfig.Load(f.Files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}
