package authz_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig/testpki"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks()...)
}

func load(t *testing.T, f testpki.Files) *tlsconfig.Source {
	t.Helper()
	src, err := tlsconfig.Load(f.Files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// startCoordinator serves a coordinator with mTLS and its role policy,
// as `mcpcancel coordinator --tls-*` does.
func startCoordinator(t *testing.T, src *tlsconfig.Source) string {
	t.Helper()
	cl := etcdtest.Single(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := coordinator.New(coordinator.Options{Client: cl.Client()})
	gs := testcluster.GRPCServer(append([]grpc.ServerOption{src.ServerOption()}, authz.Coordinator().ServerOptions()...)...)
	pb.RegisterCoordinatorServiceServer(gs, srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { srv.Run(ctx); done <- struct{}{} }()
	go func() { gs.Serve(lis); done <- struct{}{} }()
	t.Cleanup(func() { gs.Stop(); cancel(); <-done; <-done })
	select {
	case <-srv.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("coordinator not ready")
	}
	return lis.Addr().String()
}

func coordClient(t *testing.T, addr string, src *tlsconfig.Source) pb.CoordinatorServiceClient {
	return pb.NewCoordinatorServiceClient(coordConn(t, addr, src))
}

func coordConn(t *testing.T, addr string, src *tlsconfig.Source) *grpc.ClientConn {
	t.Helper()
	conn, err := dial.New(addr, src.DialOption(tlsconfig.RoleCoordinator))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func workerClient(t *testing.T, addr string, creds grpc.DialOption) pb.WorkerServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewWorkerServiceClient(conn)
}

func mcpPost(t *testing.T, url, session, body string) (string, string) {
	t.Helper()
	resp, b := testcluster.PostMCP(t, url, "", session, body)
	return resp.Header.Get("Mcp-Session-Id"), string(b)
}

func code(err error) codes.Code { return status.Code(err) }

// The whole system over mTLS, each part with the certificate of its
// role: a call runs end to end; then each role is held to its methods.
func TestRoles(t *testing.T) {
	ca := testpki.NewCA(t, "mcpcancel")
	coordAddr := startCoordinator(t, load(t, ca.Issue(t, tlsconfig.RoleCoordinator, "coord")))
	wsrc := load(t, ca.Issue(t, tlsconfig.RoleWorker, "w1"))
	w := testcluster.StartWorker(t, worker.Options{
		Coordinator: coordAddr, Name: "w1",
		DialOptions:   []grpc.DialOption{wsrc.DialOption(tlsconfig.RoleCoordinator)},
		ServerOptions: append([]grpc.ServerOption{wsrc.ServerOption()}, authz.Worker().ServerOptions()...),
	}, demo.Register)
	gsrc := load(t, ca.Issue(t, tlsconfig.RoleGateway, "gw"))
	gwConn := coordConn(t, coordAddr, gsrc)
	gw := pb.NewCoordinatorServiceClient(gwConn)
	_, url := testcluster.StartGateway(t, gwConn, gateway.Options{WorkerDialOptions: []grpc.DialOption{gsrc.DialOption(tlsconfig.RoleWorker)}})
	testcluster.WaitFor(t, "the demo tools", func() bool {
		resp, err := gw.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 3
	})
	sid, _ := mcpPost(t, url, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if _, body := mcpPost(t, url, sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"over mTLS"}}}`); !strings.Contains(body, "over mTLS") {
		t.Fatalf("call through the gateway: %s", body)
	}

	ctx := t.Context()
	key := &pb.CancelRequest{
		Target:    &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: "session:" + sid, RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}},
		Initiator: pb.Initiator_INITIATOR_CLIENT, Principal: "anonymous",
	}
	asWorker := coordClient(t, coordAddr, wsrc)
	if _, err := asWorker.Cancel(ctx, key); code(err) != codes.PermissionDenied {
		t.Fatalf("a worker cancelling by a client's key: %v", err)
	}
	if _, err := gw.Cancel(ctx, key); code(err) == codes.PermissionDenied {
		t.Fatalf("a gateway cancelling by key: %v", err)
	}
	anyone := &pb.CallRef{CallId: strings.Repeat("0", 32), Fence: 1}
	if _, err := asWorker.Complete(ctx, &pb.CompleteRequest{Call: anyone}); code(err) != codes.PermissionDenied {
		t.Fatalf("a worker completing a call without naming itself: %v", err)
	}
	if _, err := asWorker.ListAudit(ctx, &pb.ListAuditRequest{}); code(err) != codes.PermissionDenied {
		t.Fatalf("a worker reading the audit: %v", err)
	}
	stream, err := gw.Attach(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if code(err) != codes.PermissionDenied {
		t.Fatalf("a gateway attaching as a worker: %v", err)
	}
	admin := coordClient(t, coordAddr, load(t, ca.Issue(t, tlsconfig.RoleAdmin, "ops")))
	if resp, err := admin.ListAudit(ctx, &pb.ListAuditRequest{}); err != nil || len(resp.GetRecords()) == 0 {
		t.Fatalf("an admin reading the audit: %v", err)
	}
	if _, err := admin.Begin(ctx, &pb.BeginRequest{}); code(err) != codes.PermissionDenied {
		t.Fatalf("an admin beginning a call: %v", err)
	}
	// The worker's Execute serves gateways only.
	for role, creds := range map[string]grpc.DialOption{
		"worker": wsrc.DialOption(tlsconfig.RoleWorker),
		"admin":  load(t, ca.Issue(t, tlsconfig.RoleAdmin, "ops2")).DialOption(tlsconfig.RoleWorker),
	} {
		s, err := workerClient(t, w.Addr, creds).Execute(ctx, &pb.ExecuteRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if code(err) != codes.PermissionDenied {
			t.Fatalf("%s calling Execute: %v", role, err)
		}
	}
	// No certificate: the handshake fails and nothing is called.
	noCert := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))
	conn, err := grpc.NewClient(coordAddr, noCert)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewCoordinatorServiceClient(conn).ListTools(ctx, nil); code(err) != codes.Unavailable {
		t.Fatalf("no client certificate: %v", err)
	}
	s, err := workerClient(t, w.Addr, noCert).Execute(ctx, &pb.ExecuteRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if code(err) != codes.Unavailable {
		t.Fatalf("Execute without a client certificate: %v", err)
	}
}
