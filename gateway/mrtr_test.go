package gateway_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway"
)

// mrtrRound is one 2026-07-28 tools/call of ask_all and what came back.
type mrtrRound struct {
	status  int
	result  map[string]any
	errCode int
}

func callAskAll(t *testing.T, url string, id int, args map[string]any, responses map[string]any, state string) mrtrRound {
	t.Helper()
	params := map[string]any{"name": "ask_all", "arguments": args,
		"_meta": envelope(map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{}, "roots": map[string]any{}})}
	if responses != nil {
		params["inputResponses"] = responses
	}
	if state != "" {
		params["requestState"] = state
	}
	status, msgs := post26(t, url, request(id, "tools/call", params), headers2026("tools/call", "ask_all"))
	if len(msgs) == 0 {
		t.Fatalf("round %d: no answer (HTTP %d)", id, status)
	}
	last := msgs[len(msgs)-1]
	r := mrtrRound{status: status}
	if last.Error != nil {
		r.errCode = last.Error.Code
		return r
	}
	json.Unmarshal(last.Result, &r.result)
	return r
}

// inputRequest returns the one input request of an input_required result.
func inputRequest(t *testing.T, r mrtrRound) (key, method, state string) {
	t.Helper()
	if r.result["resultType"] != "input_required" {
		t.Fatalf("want input_required, got %v (error %d)", r.result, r.errCode)
	}
	reqs, _ := r.result["inputRequests"].(map[string]any)
	if len(reqs) != 1 {
		t.Fatalf("want one input request, got %v", reqs)
	}
	for k, v := range reqs {
		key, method = k, v.(map[string]any)["method"].(string)
	}
	state, _ = r.result["requestState"].(string)
	return key, method, state
}

// A native Go tool that samples, elicits and lists roots, called by a
// 2026-07-28 client: each request becomes an input_required result, and
// each retry, alternating between two replicas that share the state key,
// carries the answers so far; the last returns the tool's result with
// every answer. The state is refused when tampered with, when the retry
// names other arguments, and once it expired.
func TestTowardMRTRAcrossReplicas(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	_, urls, coord := askingStackFull(t, gateway.Options{StateKey: key}, gateway.Options{StateKey: key},
		gateway.Options{StateKey: key, InputTimeout: time.Nanosecond})
	answers := map[string]any{
		"sampling/createMessage": map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "sampled in round one"}},
		"elicitation/create":     map[string]any{"action": "accept", "content": map[string]any{"name": "Lovelace"}},
		"roots/list":             map[string]any{"roots": []any{map[string]any{"uri": "file:///mrtr"}}},
	}
	args := map[string]any{"n": 1}
	r := callAskAll(t, urls[0], 1, args, nil, "")
	given := map[string]any{}
	var seen []string
	for round := 2; ; round++ {
		k, method, state := inputRequest(t, r)
		seen = append(seen, method)
		if round == 2 {
			// Tampered, or bound to other arguments: refused.
			if bad := callAskAll(t, urls[1], 90, args, map[string]any{k: answers[method]}, state[:len(state)-2]+"AA"); bad.errCode != -32602 {
				t.Errorf("a tampered requestState was not refused with -32602: %+v", bad)
			}
			if bad := callAskAll(t, urls[1], 91, map[string]any{"n": 2}, map[string]any{k: answers[method]}, state); bad.errCode != -32602 {
				t.Errorf("a requestState for other arguments was not refused with -32602: %+v", bad)
			}
		}
		given[k] = answers[method]
		r = callAskAll(t, urls[round%2], round, args, map[string]any{k: answers[method]}, state)
		if r.result["resultType"] != "input_required" {
			break
		}
		if round > 5 {
			t.Fatalf("too many rounds: %v", seen)
		}
	}
	if strings.Join(seen, " ") != "sampling/createMessage elicitation/create roots/list" {
		t.Errorf("the client was asked %v", seen)
	}
	b, _ := json.Marshal(r.result)
	for _, want := range []string{"sampled in round one", "Lovelace", "file:///mrtr", `"resultType":"complete"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the final result lacks %s: %s", want, b)
		}
	}
	// Every round's call ended once its input_required result was out,
	// cancelled by the tool, noting what it asked and what the retry
	// already answered; the last one completed.
	recs, got := childOutcomes(t, coord, "ask_all")
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.GetOutcome()+"/"+r.GetInitiator().String()]++
	}
	if outcomes["cancelled/INITIATOR_TOOL"] != 3 || outcomes["completed/INITIATOR_UNSPECIFIED"] != 1 ||
		got["sampling/createMessage input_required"] != 1 || got["roots/list input_required"] != 1 || got["roots/list from_input"] != 1 {
		t.Errorf("the rounds' audit: outcomes %v, child requests %v", outcomes, got)
	}
	// A state sealed by the replica whose states expire at once.
	_, _, expired := inputRequest(t, callAskAll(t, urls[2], 100, args, nil, ""))
	if late := callAskAll(t, urls[0], 101, args, nil, expired); late.errCode != -32602 {
		t.Errorf("an expired requestState was not refused with -32602: %+v", late)
	}
}
