package timeouts

import (
	"context"
	"testing"
	"time"
)

// BenchmarkStatementContext is the cost of one statement context as
// proxy.Session makes it: a budget, the statement context under the
// connection's, an AfterFunc that would cancel the backend, and their
// teardown. The session makes one per statement with a deadline; without
// one it keeps the context across statements until it ends.
func BenchmarkStatementContext(b *testing.B) {
	for _, bc := range []struct {
		name    string
		timeout time.Duration
	}{{"no-timeout", 0}, {"timeout", time.Minute}} {
		b.Run(bc.name, func(b *testing.B) {
			conn, stopConn := context.WithCancel(context.Background())
			defer stopConn()
			b.ReportAllocs()
			for b.Loop() {
				budget := NewBudget(time.Now(), bc.timeout)
				budget.Enter(PhasePlan)
				ctx, cancel := WithStatementDeadline(conn, budget.Deadline())
				done := make(chan struct{})
				stop := context.AfterFunc(ctx, func() { close(done) })
				if !stop() {
					b.Fatal("the statement context ended")
				}
				cancel(nil)
			}
		})
	}
}
