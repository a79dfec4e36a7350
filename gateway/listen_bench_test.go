package gateway_test

import (
	"fmt"
	"testing"
)

// BenchmarkListenSubscribe opens and closes a listen naming one resource
// on gateway A, its worker attached to the other coordinator replica:
// the time to the acknowledgement (subscribed at the coordinator and the
// worker) and the etcd revisions a listen's subscription costs, opened
// and closed.
func BenchmarkListenSubscribe(b *testing.B) {
	st := newSubStack(b)
	rev := func() int64 {
		r, err := st.cli.Client().Get(b.Context(), "revision-probe")
		if err != nil {
			b.Fatal(err)
		}
		return r.Header.Revision
	}
	r0 := rev()
	b.ResetTimer()
	for i := range b.N {
		l, _ := openListen(b, st.urlA, fmt.Sprint("b", i), map[string]any{"resourceSubscriptions": []string{"test://a"}}, map[string]any{})
		st.srv.event(b)
		l.stop()
		st.srv.event(b)
	}
	b.StopTimer()
	b.ReportMetric(float64(rev()-r0)/float64(b.N), "etcd-revisions/listen")
}
