package gateway

import (
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// parkForInput answers a 2026-07-28 call's request toward its client.
func (c *call) parkForInput(wc pb.WorkerServiceClient, begun *pb.BeginResponse, r *pb.ClientRequest) {
	c.refuse(wc, begun.GetCallId(), r.GetSeq(), jsonrpc.CodeMethodNotFound, "2026-07-28 clients take no requests from servers")
}
