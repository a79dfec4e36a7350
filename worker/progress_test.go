package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestProgressDigestBounds: a digest lists the running calls that have
// reported progress and have run at least the minimum age, the most
// recent report first, at most maxDigestCalls of them, with messages cut
// on a character boundary; calls left out for their youth are said to be.
func TestProgressDigestBounds(t *testing.T) {
	w := New(Options{Name: "w"})
	now := time.Now()
	old := now.Add(-time.Minute)
	add := func(id string, e *execution) { w.calls[id] = e }
	for i := range maxDigestCalls + 5 {
		add(fmt.Sprintf("%032x", i), &execution{began: old, reported: reported{at: old.Add(time.Duration(i) * time.Millisecond), progress: float64(i), message: strings.Repeat("é", 100)}})
	}
	add("quiet", &execution{began: old})
	add("settling", &execution{began: old, state: settling, reported: reported{at: now, progress: 1}})
	add("young", &execution{began: now, reported: reported{at: now, progress: 1}})

	d, younger := w.progressDigest(time.Second)
	if !younger {
		t.Error("younger = false, want true: a call that reported progress was too young to list")
	}
	if len(d.Calls) != maxDigestCalls {
		t.Fatalf("%d calls listed, want %d", len(d.Calls), maxDigestCalls)
	}
	for i, c := range d.Calls {
		if want := fmt.Sprintf("%032x", maxDigestCalls+4-i); c.CallId != want {
			t.Fatalf("call %d is %s, want %s (the most recent first)", i, c.CallId, want)
		}
		if m := c.GetMessage(); len(m) > maxDigestMessageLen || !utf8.ValidString(m) || len(m) < maxDigestMessageLen-1 {
			t.Fatalf("message %q (%d bytes), want cut to at most %d bytes on a character boundary", m, len(m), maxDigestMessageLen)
		}
	}
	if _, younger := w.progressDigest(0); younger {
		t.Error("with no minimum age, no call is too young")
	}
}
