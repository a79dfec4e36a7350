// Package authz holds the authorisation policies: for gRPC calls, by the
// role of the caller's verified client certificate (see package
// tlsconfig): a policy maps each method to the roles that may call it,
// and a few methods also check the request (a worker may settle only
// calls it names itself as the owner of), installed only on servers that
// require client certificates; and for MCP clients of the gateway, a
// ToolPolicy of the OAuth scopes each request needs and per-principal
// allow and deny lists of tools.
package authz

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

// Policy maps full method names ("/pkg.Service/Method") to the roles
// allowed to call them. A method it does not name is denied to everyone.
type Policy struct {
	methods map[string]map[string]bool
	// check, if set for a method and role, vets the request as well.
	check map[string]func(role string, req any) error
}

// healthMethods are open to every role: probes and load balancers.
var healthMethods = []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List"}

func newPolicy(rules map[string][]string) *Policy {
	p := &Policy{methods: map[string]map[string]bool{}, check: map[string]func(string, any) error{}}
	for _, m := range healthMethods {
		rules[m] = []string{tlsconfig.RoleGateway, tlsconfig.RoleWorker, tlsconfig.RoleCoordinator, tlsconfig.RoleAdmin, tlsconfig.RoleOperator}
	}
	for m, roles := range rules {
		p.methods[m] = map[string]bool{}
		for _, r := range roles {
			p.methods[m][r] = true
		}
	}
	return p
}

func coord(m string) string { return "/" + pb.CoordinatorService_ServiceDesc.ServiceName + "/" + m }
func admin(m string) string { return "/" + pb.AdminService_ServiceDesc.ServiceName + "/" + m }

// Coordinator is the coordinator's policy. Gateways run calls and
// sessions; workers attach and settle their own calls; admins (the
// operator CLI) read calls and the audit trail; operators read what
// admins read and cancel running calls; coordinators call none.
func Coordinator() *Policy {
	const g, w, a, o = tlsconfig.RoleGateway, tlsconfig.RoleWorker, tlsconfig.RoleAdmin, tlsconfig.RoleOperator
	p := newPolicy(map[string][]string{
		coord("Begin"): {g}, coord("Start"): {g}, coord("AbandonBegin"): {g}, coord("CancelScope"): {g},
		coord("OpenSession"): {g}, coord("GetSession"): {g}, coord("CloseSession"): {g},
		coord("Cancel"): {g, w}, coord("Fail"): {g, w}, coord("Complete"): {w},
		coord("Attach"):    {w},
		coord("ListTools"): {g, w, a, o}, coord("WatchTools"): {g},
		coord("ListWorkers"): {g, a, o}, coord("GetCall"): {g, a, o}, coord("GetCallStates"): {g, a, o},
		coord("ListAudit"): {a, o}, coord("WatchAudit"): {a, o},
		admin("ListCalls"): {a, o}, admin("WatchCalls"): {a, o}, admin("OperatorCancel"): {o},
		// Tasks, subscriptions and session notifications are the gateway's,
		// on behalf of its clients; the coordinator scopes each by principal.
		coord("CreateTask"): {g}, coord("GetTask"): {g}, coord("WaitTask"): {g},
		coord("ListTasks"): {g}, coord("CancelTask"): {g}, coord("WatchTask"): {g},
		coord("SubscribeResource"): {g}, coord("WatchSessionNotifications"): {g},
		// A task's client answers through its gateway; the task's worker
		// records what its call waits on.
		coord("UpdateTask"): {g}, coord("SetTaskInput"): {w},
		// A worker starts its tasks whose gateway was lost before the
		// task's run opened.
		coord("ListTaskRuns"): {w},
	})
	for _, m := range []string{"Cancel", "Fail", "Complete", "SetTaskInput"} {
		p.check[coord(m)] = workerSettlesOwnCall
	}
	return p
}

// Worker is the worker's policy: only gateways run calls.
func Worker() *Policy {
	return newPolicy(map[string][]string{
		"/" + pb.WorkerService_ServiceDesc.ServiceName + "/Execute": {tlsconfig.RoleGateway},
		// A client's answer to a request toward it, from any gateway.
		"/" + pb.WorkerService_ServiceDesc.ServiceName + "/Answer": {tlsconfig.RoleGateway},
		// The callers of calls that its own connection runs are gone.
		"/" + pb.WorkerService_ServiceDesc.ServiceName + "/CallersGone": {tlsconfig.RoleGateway},
		// A 2026-07-28 call's work waits for its client's retry.
		"/" + pb.WorkerService_ServiceDesc.ServiceName + "/Park": {tlsconfig.RoleGateway},
	})
}

// workerSettlesOwnCall lets a worker settle a call only by its CallRef,
// naming itself as the owner: the coordinator then refuses it unless the
// call runs on that worker. A worker never cancels by a client's key.
func workerSettlesOwnCall(role string, req any) error {
	if role != tlsconfig.RoleWorker {
		return nil
	}
	var ref *pb.CallRef
	switch r := req.(type) {
	case *pb.CancelRequest:
		ref = r.GetCall()
	case *pb.FailRequest:
		ref = r.GetCall()
	case *pb.CompleteRequest:
		ref = r.GetCall()
	case *pb.SetTaskInputRequest:
		ref = r.GetCall()
	}
	if ref.GetWorker() == "" {
		return status.Error(codes.PermissionDenied, "a worker may settle only a call it names itself the owner of")
	}
	return nil
}

// roleOf returns the role of the verified client certificate of ctx's
// peer.
func roleOf(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", status.Error(codes.Unauthenticated, "a verified client certificate is required")
	}
	return tlsconfig.RoleOf(info.State.VerifiedChains[0][0]), nil
}

// allow authorises a call of method from ctx's peer.
func (p *Policy) allow(ctx context.Context, method string) (string, error) {
	role, err := roleOf(ctx)
	if err != nil {
		return "", err
	}
	if !p.methods[method][role] {
		return "", status.Errorf(codes.PermissionDenied, "role %q may not call %s", role, method[strings.LastIndex(method, "/")+1:])
	}
	return role, nil
}

// UnaryServerInterceptor enforces p on unary calls.
func (p *Policy) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		role, err := p.allow(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if check := p.check[info.FullMethod]; check != nil {
			if err := check(role, req); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor enforces p on streams.
func (p *Policy) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if _, err := p.allow(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// ServerOptions install p's interceptors, after any chained before them.
func (p *Policy) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(p.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(p.StreamServerInterceptor()),
	}
}
