package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A gateway's first answers are current, though its watch of the
// catalogue lags (a busy machine): a worker that attached before the
// first tools/list is in it, in resources/list and in initialize's
// capabilities. The gateway's watch stream is held after its first
// (empty) catalogue until the gateway asks the coordinator for the
// current one; a gateway that answered from its watch alone would list
// nothing.
func TestFirstListIsCurrent(t *testing.T) {
	e := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, e.Client(), coordinator.Options{})
	lag := &watchLag{release: make(chan struct{})}
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(lag.stream), grpc.WithUnaryInterceptor(lag.unary))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g, url := testcluster.StartGateway(t, conn, gateway.Options{})
	<-g.Ready() // the empty catalogue, before any worker
	testcluster.StartWorker(t, worker.Options{Coordinator: c.Addr, Name: "w"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "late"}, func(context.Context, *worker.Call) (*worker.Result, error) { return worker.Text("ok"), nil })
		w.HandleResource(&worker.Resource{URI: "test://late", Name: "late"}, func(context.Context, *worker.Call) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{}, nil
		})
	})

	resp, body := testcluster.PostMCP(t, url, "", "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	var init struct {
		Result struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		} `json:"result"`
	}
	json.Unmarshal(body, &init)
	_, tools := testcluster.PostMCP(t, url, "", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	_, resources := testcluster.PostMCP(t, url, "", sid, `{"jsonrpc":"2.0","id":2,"method":"resources/list"}`)
	if init.Result.Capabilities["resources"] == nil || !strings.Contains(string(tools), `"late"`) || !strings.Contains(string(resources), `"test://late"`) {
		t.Fatalf("the first answers miss the worker that attached before them:\ninitialize %s\ntools/list %s\nresources/list %s", body, tools, resources)
	}
}

// watchLag holds every WatchTools message after the first until the
// client calls ListTools.
type watchLag struct {
	release chan struct{}
	once    sync.Once
}

func (l *watchLag) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if strings.HasSuffix(method, "/ListTools") {
		l.once.Do(func() { close(l.release) })
	}
	return err
}

func (l *watchLag) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/WatchTools") {
		return s, err
	}
	return &laggingStream{ClientStream: s, lag: l}, nil
}

type laggingStream struct {
	grpc.ClientStream
	lag *watchLag
	n   int
}

func (s *laggingStream) RecvMsg(m any) error {
	if s.n++; s.n > 1 {
		select {
		case <-s.lag.release:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	return s.ClientStream.RecvMsg(m)
}
