package upstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// TestWaitReadySaysWhyTheServerDidNotStart: WaitReady returns the first
// failure to start the server, naming the command, saying how it ended,
// and quoting the last of its stderr, while Run goes on retrying.
func TestWaitReadySaysWhyTheServerDidNotStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		want    []string
	}{
		{"no such program", []string{"mcpcancel-no-such-server"}, []string{"starting mcpcancel-no-such-server: ", "executable file not found"}},
		{"exits at once", []string{"sh", "-c", "echo line one >&2; echo cannot open the database >&2; exit 3"},
			[]string{"starting sh: it exited (exit status 3) before answering initialize; the last it wrote to stderr:\n  line one\n  cannot open the database"}},
		{"refuses initialize", []string{"sh", "-c", `while read -r req; do id=$(printf '%s' "$req" | sed -n 's/.*"id":\([0-9]*\).*/\1/p'); ` +
			`[ -n "$id" ] && printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"licence expired"}}\n' "$id"; done`},
			[]string{"starting sh: ", "licence expired"}},
		{"never answers", []string{"sh", "-c", "echo still loading >&2; exec sleep 60"},
			[]string{"starting sh: no answer to initialize within 300ms", "still loading"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := worker.New(worker.Options{Coordinator: "127.0.0.1:1"})
			a := upstream.New(w, upstream.Options{Command: tc.command, ConnectWait: 300 * time.Millisecond, MinBackoff: time.Minute})
			ctx, cancel := context.WithCancel(t.Context())
			ran := make(chan error, 1)
			go func() { ran <- a.Run(ctx) }() // waited for below
			wait, stop := context.WithTimeout(t.Context(), 10*time.Second)
			defer stop()
			err := a.WaitReady(wait)
			cancel()
			<-ran
			if err == nil {
				t.Fatal("WaitReady = nil for a server that cannot start")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("WaitReady = %q, want it to say %q", err, want)
				}
			}
		})
	}
}
