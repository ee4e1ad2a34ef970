package timeouts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/mzproxy/mzproxy/pgerr"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestDeadline(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    time.Time
	}{
		{0, time.Time{}},
		{-time.Second, time.Time{}},
		{time.Millisecond, t0.Add(time.Millisecond)},
		{5 * time.Second, t0.Add(5 * time.Second)},
		{maxMillis * time.Millisecond, t0.Add(maxMillis * time.Millisecond)},
	} {
		if got := Deadline(t0, tc.timeout); !got.Equal(tc.want) {
			t.Errorf("Deadline(t0, %v) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
}

func TestPhaseString(t *testing.T) {
	for _, tc := range []struct {
		p    Phase
		want string
	}{
		{PhaseNone, "none"},
		{PhasePlan, "plan"},
		{PhaseSemaphoreWait, "semaphore wait"},
		{PhaseTimestamp, "timestamp"},
		{PhaseUpperWait, "upper wait"},
		{PhaseHold, "hold"},
		{PhaseOCCAttempt, "OCC attempt"},
		{PhaseExecute, "execute"},
		{PhaseStream, "stream"},
		{Phase(42), "Phase(42)"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("Phase(%d).String() = %q, want %q", uint32(tc.p), got, tc.want)
		}
	}
}

var causeNames = map[string]Cause{
	"timeout":             Timeout,
	"user-cancel":         UserCancel,
	"idle-in-transaction": IdleInTransaction,
	"idle-session":        IdleSession,
}

func phaseByName(t *testing.T, name string) Phase {
	for p := PhaseNone; p < numPhases; p++ {
		if p.String() == name {
			return p
		}
	}
	t.Fatalf("no phase %q", name)
	return 0
}

func describe(err error) string {
	e := pgerr.As(err)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s\n", e.Severity, e.Code, e.Message)
	var in *Interruption
	if errors.As(err, &in) {
		fmt.Fprintf(&b, "interruption: %v\n", in)
	}
	return b.String()
}

// TestErrorFor prints what the client sees for each cause; the texts and
// codes in testdata/errors were checked against PostgreSQL 15 (a
// statement_timeout, pg_cancel_backend, and both idle timeouts).
//
//	error cause=<timeout|user-cancel|idle-in-transaction|idle-session> phase=<name, _ for space>
func TestErrorFor(t *testing.T) {
	datadriven.RunTest(t, "testdata/errors", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "error":
			var cause, phase string
			d.ScanArgs(t, "cause", &cause)
			d.ScanArgs(t, "phase", &phase)
			c, ok := causeNames[cause]
			if !ok {
				d.Fatalf(t, "no cause %q", cause)
			}
			return describe(ErrorFor(c, phaseByName(t, strings.ReplaceAll(phase, "_", " "))))
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func TestErrorForZeroCausePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("ErrorFor(0, ...) did not panic")
		}
	}()
	ErrorFor(0, PhasePlan)
}

func TestCauseError(t *testing.T) {
	for c, want := range map[Cause]string{
		Timeout:    "canceling statement due to statement timeout",
		UserCancel: "canceling statement due to user request",
		Cause(0):   "timeouts.Cause(0)",
		Cause(9):   "timeouts.Cause(9)",
	} {
		if got := c.Error(); got != want {
			t.Errorf("Cause(%d).Error() = %q, want %q", uint8(c), got, want)
		}
	}
}

var errShutdown = pgerr.Fatal(pgerr.AdminShutdown, "terminating connection due to administrator command")

// TestStatementContext drives WithStatementDeadline, Cancel, CauseOf and
// Budget.Err through the ways a statement's context ends. Deadlines are
// either far in the future or already past, so no test waits on a timer.
func TestStatementContext(t *testing.T) {
	past, future := time.Unix(1, 0), time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name     string
		parent   func() (context.Context, func())
		deadline time.Time
		act      func(cancel context.CancelCauseFunc)
		want     Cause
		wantErr  string // describe(Budget.Err); "" for nil
	}{
		{
			name:     "running",
			deadline: future,
		},
		{
			name:     "no deadline, running",
			deadline: time.Time{},
		},
		{
			name:     "deadline passed",
			deadline: past,
			want:     Timeout,
			wantErr:  "ERROR 57014: canceling statement due to statement timeout\ninterruption: canceling statement due to statement timeout (in phase upper wait)\n",
		},
		{
			name:     "user cancel",
			deadline: future,
			act:      func(c context.CancelCauseFunc) { Cancel(c, UserCancel) },
			want:     UserCancel,
			wantErr:  "ERROR 57014: canceling statement due to user request\ninterruption: canceling statement due to user request (in phase upper wait)\n",
		},
		{
			name:     "user cancel, no deadline",
			deadline: time.Time{},
			act:      func(c context.CancelCauseFunc) { Cancel(c, UserCancel) },
			want:     UserCancel,
			wantErr:  "ERROR 57014: canceling statement due to user request\ninterruption: canceling statement due to user request (in phase upper wait)\n",
		},
		{
			name:     "cancel after the deadline keeps the first cause",
			deadline: past,
			act:      func(c context.CancelCauseFunc) { Cancel(c, UserCancel) },
			want:     Timeout,
			wantErr:  "ERROR 57014: canceling statement due to statement timeout\ninterruption: canceling statement due to statement timeout (in phase upper wait)\n",
		},
		{
			name:     "statement ended normally",
			deadline: future,
			act:      func(c context.CancelCauseFunc) { c(nil) },
			want:     0,
			wantErr:  "ERROR 57014: context canceled\n",
		},
		{
			name: "parent's own deadline",
			parent: func() (context.Context, func()) {
				return context.WithDeadline(context.Background(), past)
			},
			deadline: future,
			want:     Timeout,
			wantErr:  "ERROR 57014: canceling statement due to statement timeout\ninterruption: canceling statement due to statement timeout (in phase upper wait)\n",
		},
		{
			name: "parent shut down",
			parent: func() (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(errShutdown)
				return ctx, func() {}
			},
			deadline: future,
			want:     0,
			wantErr:  "FATAL 57P01: terminating connection due to administrator command\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := context.Background()
			if tc.parent != nil {
				p, cancel := tc.parent()
				defer cancel()
				parent = p
			}
			b := &Budget{deadline: tc.deadline}
			b.Enter(PhaseUpperWait)
			ctx, cancel := WithStatementDeadline(parent, b.Deadline())
			defer cancel(nil)
			if tc.act != nil {
				tc.act(cancel)
			}
			if tc.want != 0 || tc.wantErr != "" {
				<-ctx.Done()
			}
			if got := CauseOf(ctx); got != tc.want {
				t.Errorf("CauseOf = %v, want %v", got, tc.want)
			}
			got := ""
			if err := b.Err(ctx); err != nil {
				got = describe(err)
			}
			if got != tc.wantErr {
				t.Errorf("Budget.Err:\n%s\nwant:\n%s", got, tc.wantErr)
			}
		})
	}
}

func TestBudget(t *testing.T) {
	for _, timeout := range []time.Duration{0, -time.Second, 5 * time.Second} {
		b := NewBudget(t0, timeout)
		if !b.Deadline().Equal(Deadline(t0, timeout)) {
			t.Errorf("NewBudget(t0, %v).Deadline() = %v", timeout, b.Deadline())
		}
	}
}

// TestBudgetPhaseAcrossGoroutines: the statement's goroutine enters phases
// while a canceling goroutine reads them (run with -race).
func TestBudgetPhaseAcrossGoroutines(t *testing.T) {
	b := NewBudget(t0, time.Second)
	if b.Phase() != PhaseNone {
		t.Fatalf("new budget in phase %v", b.Phase())
	}
	ctx, cancel := WithStatementDeadline(context.Background(), time.Time{})
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for p := PhasePlan; p <= PhaseExecute; p++ {
			b.Enter(p)
		}
		Cancel(cancel, UserCancel)
	}()
	<-ctx.Done()
	wg.Wait()
	var in *Interruption
	if err := b.Err(ctx); !errors.As(err, &in) || in.Cause != UserCancel || in.Phase != PhaseExecute {
		t.Fatalf("Err = %v (%+v), want a user cancel in phase execute", err, in)
	}
}
