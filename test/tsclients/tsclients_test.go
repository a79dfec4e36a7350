// Package tsclients drives the real gateway with the official TypeScript
// MCP clients: @modelcontextprotocol/sdk (2025-era) and
// @modelcontextprotocol/client (2026-07-28), over Streamable HTTP and
// stdio, reading what crossed the wire, not only what the SDKs show.
package tsclients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

var binary string // mcpcancel, built once for the stdio cases

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tsclients-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "mcpcancel")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/mcpcancel/mcpcancel/cmd/mcpcancel").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building mcpcancel: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type stack struct {
	cli   *clientv3.Client
	coord *testcluster.Coordinator
	url   string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	cl := etcdtest.Single(t)
	st := &stack{cli: cl.Client()}
	st.coord = testcluster.StartCoordinator(t, st.cli, coordinator.Options{})
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "w1"}, demo.Register)
	_, st.url = testcluster.StartGateway(t, st.coord.Conn(t), gateway.Options{})
	return st
}

// event is one JSON line a client script printed.
type event map[string]any

func (e event) str(k string) string { s, _ := e[k].(string); return s }

// run runs a client script to its end and returns its events.
func run(t *testing.T, script string, args ...string) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := nodetest.Node(t, ctx, append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var evs []event
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			evs = append(evs, e)
		}
	}
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	return evs
}

func find(evs []event, name string) event {
	for _, e := range evs {
		if e.str("event") == name {
			return e
		}
	}
	return nil
}

// callID finds the JSON-RPC id the client gave its tools/call.
func callID(evs []event) any {
	for _, e := range evs {
		if e.str("event") == "wire" && e.str("dir") == "out" {
			if d, ok := e["data"].(map[string]any); ok && d["method"] == "tools/call" {
				return d["id"]
			}
		}
	}
	return nil
}

// responsesOnWire lists response messages for id that reached the client.
func responsesOnWire(evs []event, id any) []event {
	want, _ := json.Marshal(id)
	var out []event
	for _, e := range evs {
		if e.str("event") != "wire" || e.str("dir") != "in" {
			continue
		}
		d, ok := e["data"].(map[string]any)
		if !ok || d["method"] != nil {
			continue
		}
		got, _ := json.Marshal(d["id"])
		if d["id"] != nil && bytes.Equal(got, want) {
			out = append(out, e)
		}
	}
	return out
}

// The official TypeScript clients, both eras, both transports: call sleep
// with a progress token, abort after two progress notifications. The wire
// carries no response and no error for that id and no progress after the
// abort; the worker's handler really returned; the audit has one
// cancelled record.
func TestTypeScriptClientsCancel(t *testing.T) {
	nodetest.Install(t)
	for _, tc := range []struct {
		name, script string
		stdio        bool
	}{
		{"sdk-2025/http", "call2025.mjs", false},
		{"sdk-2025/stdio", "call2025.mjs", true},
		{"client-2026/http", "call2026.mjs", false},
		{"client-2026/stdio", "call2026.mjs", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t)
			target := []string{"--url", st.url}
			if tc.stdio {
				target = []string{"--stdio", binary + " gateway --stdio --coordinator " + st.coord.Addr}
			}
			evs := run(t, tc.script, append(target,
				"--tool", "sleep", "--args", `{"seconds":30,"steps":60}`,
				"--cancel-after-progress", "2", "--reason", "user stop", "--linger-ms", "700")...)
			if find(evs, "cancel_sent") == nil || find(evs, "aborted") == nil {
				t.Fatalf("the call was not aborted: %v", evs)
			}
			if r := find(evs, "result"); r != nil {
				t.Fatalf("the client got a result after cancelling: %v", r)
			}
			id := callID(evs)
			if id == nil {
				t.Fatal("no tools/call on the wire")
			}
			if got := responsesOnWire(evs, id); len(got) != 0 {
				t.Fatalf("the wire carried a response for cancelled request %v: %v", id, got)
			}
			if l := find(evs, "linger_done"); l == nil || l["lateCount"] != float64(0) {
				t.Fatalf("late messages after the cancel: %v", l)
			}
			rec := waitAudit(t, st.cli)
			if rec.Outcome != "cancelled" || rec.Initiator != "client" || rec.StoppedAt == nil {
				t.Fatalf("audit = %+v", rec)
			}
			if tc.script == "call2025.mjs" && rec.Reason != "user stop" {
				t.Fatalf("reason = %q", rec.Reason)
			}
		})
	}
}

// The clients see completion as usual: echo's result comes back.
func TestTypeScriptClientsComplete(t *testing.T) {
	nodetest.Install(t)
	st := newStack(t)
	for _, script := range []string{"call2025.mjs", "call2026.mjs"} {
		evs := run(t, script, "--url", st.url, "--tool", "echo", "--args", `{"text":"hello"}`)
		r := find(evs, "result")
		if r == nil {
			t.Fatalf("%s: no result: %v", script, evs)
		}
		b, _ := json.Marshal(r["result"])
		if !bytes.Contains(b, []byte("hello")) {
			t.Fatalf("%s: result = %s", script, b)
		}
	}
}

// waitAudit waits for the one sleep call's audit record with stopped_at.
func waitAudit(t *testing.T, cli *clientv3.Client) *coordinator.AuditRecord {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := cli.Get(t.Context(), "/mcpcancel/v1/audit/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var recs []*coordinator.AuditRecord
		for _, kv := range resp.Kvs {
			var a coordinator.AuditRecord
			if json.Unmarshal(kv.Value, &a) == nil && a.Tool == "sleep" {
				recs = append(recs, &a)
			}
		}
		if len(recs) > 1 {
			t.Fatalf("%d audit records for one call", len(recs))
		}
		if len(recs) == 1 && recs[0].StoppedAt != nil {
			return recs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no complete audit record: %v", recs)
		}
		tick := time.NewTimer(10 * time.Millisecond)
		<-tick.C
	}
}
