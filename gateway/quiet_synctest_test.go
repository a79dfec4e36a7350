package gateway

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// quietRig runs quietWatch on the fake clock with a scripted state: it
// records when each probe asked and when the watch ended the stream.
type quietRig struct {
	start time.Time

	mu     sync.Mutex
	state  pb.CallState
	probes []time.Duration // since start
	ended  time.Duration   // since start; -1 while not ended
}

func newQuietRig(state pb.CallState) *quietRig {
	return &quietRig{start: time.Now(), state: state, ended: -1}
}

func (r *quietRig) stateOf() pb.CallState {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.probes = append(r.probes, time.Since(r.start))
	return r.state
}

func (r *quietRig) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = time.Since(r.start)
}

func (r *quietRig) set(s pb.CallState) { r.mu.Lock(); r.state = s; r.mu.Unlock() }

func (r *quietRig) seen() ([]time.Duration, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.probes), r.ended
}

// at advances the fake clock to d after start and lets the watch act.
func (r *quietRig) at(d time.Duration) {
	time.Sleep(time.Until(r.start.Add(d)))
	synctest.Wait()
}

const quietEvery = 10 * time.Second

// The quiet-stream probe's timing, on the fake clock: it asks every
// interval while nothing is heard and the call runs; a message heard puts
// the next probe a whole interval later; a cancelled or failed call ends
// the stream at the probe that sees it; a completed one gets half an
// interval for its result, which, if heard, keeps the stream, and if not,
// ends it.
func TestQuietProbeTiming(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name       string
		script     func(r *quietRig, heard, completed func())
		wantProbes []time.Duration
		wantEnded  time.Duration // -1: never
	}{
		{"a running call is asked every interval", func(r *quietRig, _, _ func()) { r.at(35 * s) },
			[]time.Duration{10 * s, 20 * s, 30 * s}, -1},
		{"messages heard hold the probe off", func(r *quietRig, heard, _ func()) {
			for d := 5 * s; d <= 40*s; d += 5 * s {
				r.at(d)
				heard()
			}
			r.at(49 * s)
		}, nil, -1},
		{"a message restarts the interval", func(r *quietRig, heard, _ func()) {
			r.at(15 * s)
			heard()
			r.at(35 * s)
		}, []time.Duration{10 * s, 25 * s, 35 * s}, -1},
		{"a cancelled call ends at the probe that sees it", func(r *quietRig, _, _ func()) {
			r.at(15 * s)
			r.set(pb.CallState_CALL_STATE_CANCELLED)
			r.at(60 * s)
		}, []time.Duration{10 * s, 20 * s}, 20 * s},
		{"a failed call ends too", func(r *quietRig, _, _ func()) {
			r.set(pb.CallState_CALL_STATE_FAILED)
			r.at(60 * s)
		}, []time.Duration{10 * s}, 10 * s},
		{"a completed call whose result never comes ends half an interval later", func(r *quietRig, _, _ func()) {
			r.set(pb.CallState_CALL_STATE_COMPLETED)
			r.at(60 * s)
		}, []time.Duration{10 * s, 15 * s}, 15 * s},
		{"a message after COMPLETED starts the wait again", func(r *quietRig, heard, _ func()) {
			r.set(pb.CallState_CALL_STATE_COMPLETED)
			r.at(12 * s)
			heard() // the result, as it goes out
			r.at(30 * s)
		}, []time.Duration{10 * s, 22 * s, 27 * s}, 27 * s},
		{"a completion learnt otherwise ends the stream half an interval later, with no probe", func(r *quietRig, _, completed func()) {
			r.at(3 * s)
			completed() // the gateway's cancel lost to it; probes would say RUNNING
			r.at(30 * s)
		}, nil, 8 * s},
		{"a message after a completion learnt otherwise goes back to probing", func(r *quietRig, heard, completed func()) {
			r.at(3 * s)
			completed()
			r.at(5 * s)
			heard()
			r.at(30 * s)
		}, []time.Duration{15 * s, 25 * s}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newQuietRig(pb.CallState_CALL_STATE_RUNNING)
				heard, completed, stop := quietWatch(quietEvery, r.stateOf, r.end)
				tc.script(r, heard, completed)
				stop() // returns: the watch's goroutine is gone
				probes, ended := r.seen()
				if !slices.Equal(probes, tc.wantProbes) || ended != tc.wantEnded {
					t.Fatalf("probes at %v, ended at %v; want probes at %v, ended at %v", probes, ended, tc.wantProbes, tc.wantEnded)
				}
			})
		})
	}
}
