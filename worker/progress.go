package worker

import (
	"cmp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Bounds on a progress digest: the coordinator stores it whole, as one
// etcd value per worker.
const (
	maxDigestCalls      = 1000
	maxDigestMessageLen = 128
)

// reported is the last progress a call's handler reported, whether or not
// its client asked for progress: operators see it in the call listings.
type reported struct {
	at              time.Time // zero: none yet
	progress, total float64
	message         string
}

// noteLocked records a report that raises the call's progress (or is its
// first), and says whether it did. e.mu must be held.
func (e *execution) noteLocked(p, total float64, msg string) bool {
	if e.state != running || !e.reported.at.IsZero() && p <= e.reported.progress {
		return false
	}
	e.reported = reported{at: time.Now(), progress: p, total: total, message: msg}
	return true
}

// progressDigest lists the last progress of every running call that has
// reported any and has run for at least minAge, the most recent first, at
// most maxDigestCalls of them. younger says whether a call that reported
// progress was left out for its youth: it is listed once it is old enough.
// Calls shorter than a heartbeat end before an operator could see them,
// so their progress costs no write.
func (w *Worker) progressDigest(minAge time.Duration) (d *pb.ProgressDigest, younger bool) {
	oldest := time.Now().Add(-minAge)
	w.mu.Lock()
	var rs []*pb.CallProgress
	for id, e := range w.calls {
		e.mu.Lock()
		r, ok := e.reported, e.state == running && !e.reported.at.IsZero()
		e.mu.Unlock()
		switch {
		case ok && e.began.After(oldest):
			younger = true
		case ok:
			rs = append(rs, &pb.CallProgress{CallId: id, At: timestamppb.New(r.at), Progress: r.progress, Total: r.total,
				Message: truncateUTF8(r.message, maxDigestMessageLen)})
		}
	}
	w.mu.Unlock()
	slices.SortFunc(rs, func(a, b *pb.CallProgress) int {
		return cmp.Compare(b.GetAt().AsTime().UnixNano(), a.GetAt().AsTime().UnixNano())
	})
	return &pb.ProgressDigest{Calls: rs[:min(len(rs), maxDigestCalls)]}, younger
}

// truncateUTF8 cuts s to at most n bytes on a character boundary,
// dropping invalid UTF-8.
func truncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
