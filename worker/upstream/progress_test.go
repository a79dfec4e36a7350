package upstream_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// Every progress notification a fronted server sends before its result
// reaches the client before the result: 10 concurrent calls of
// server-everything's long-running operation, 20 times over. The client
// reads each call's stream raw, so what is checked is the gateway's wire
// order, not a client library's.
func TestEveryUpstreamProgressArrivesBeforeItsResult(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		cmd, _ := stdioEverything(t)
		progressBeforeResults(t, upstream.Options{Command: cmd})
	})
	t.Run("http", func(t *testing.T) {
		progressBeforeResults(t, upstream.Options{URL: httpEverything(t)})
	})
}

func progressBeforeResults(t *testing.T, opts upstream.Options) {
	const rounds, concurrent, steps = 20, 10, 4
	st := startStack(t, opts, longOp)
	resp, _ := testcluster.PostMCP(t, st.url, "", "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	id := 0
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for range concurrent {
			id++
			callID := id
			wg.Go(func() { errs <- progressThenResult(t, st.url, sid, callID, steps) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// progressThenResult makes one call with a progress token and checks its
// stream: every step's progress, then the result, then nothing.
func progressThenResult(t *testing.T, url, sid string, id, steps int) error {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"duration":0.2,"steps":%d},"_meta":{"progressToken":"tok-%d"}}}`, id, longOp, steps, id)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("call %d: HTTP %d %s: %s", id, resp.StatusCode, ct, b)
	}
	var progress []float64
	answered := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Progress float64 `json:"progress"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("call %d: bad event %q", id, data)
		}
		switch {
		case answered:
			return fmt.Errorf("call %d: %s after its result", id, data)
		case m.Method == "notifications/progress":
			progress = append(progress, m.Params.Progress)
		case m.Result != nil:
			answered = true
		case m.ID != nil:
			return fmt.Errorf("call %d: %s", id, data)
		}
	}
	if !answered || len(progress) != steps {
		return fmt.Errorf("call %d: progress %v before the result (answered %v); want all %d steps first", id, progress, answered, steps)
	}
	return nil
}
