package linearize

import (
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

var historyFile = flag.String("history", "", "replay this history (linearizability.json from a failed robustness run)")

// TestReplayHistory checks a history a robustness run wrote, with the
// harness's options, and writes its visualisation beside it:
//
//	go test ./test/robustness/linearize -run TestReplayHistory -history /tmp/robustness-run-N/linearizability.json
func TestReplayHistory(t *testing.T) {
	if *historyFile == "" {
		t.Skip("pass -history FILE")
	}
	h, err := ReadHistory(*historyFile)
	if err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(filepath.Dir(*historyFile), "replay.html")
	r, err := Check(Options{Janitor: true, Retention: true}, h, time.Minute, html)
	if err != nil {
		t.Fatal(err)
	}
	if r.Result != porcupine.Ok {
		t.Fatal(r)
	}
	t.Log(r)
}
