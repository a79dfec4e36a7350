package authz

import (
	"testing"

	"google.golang.org/grpc"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Every method of the services has a rule: a new RPC fails this test
// until someone decides which roles may call it (the policy denies what
// it does not name, so it would otherwise be closed to everyone).
func TestPolicyNamesEveryMethod(t *testing.T) {
	for _, tc := range []struct {
		p    *Policy
		desc grpc.ServiceDesc
	}{{Coordinator(), pb.CoordinatorService_ServiceDesc}, {Worker(), pb.WorkerService_ServiceDesc}} {
		var names []string
		for _, m := range tc.desc.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range tc.desc.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			if len(tc.p.methods["/"+tc.desc.ServiceName+"/"+n]) == 0 {
				t.Errorf("%s/%s: no role may call it", tc.desc.ServiceName, n)
			}
		}
	}
}
