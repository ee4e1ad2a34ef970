package occ

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/timeouts"
)

// fakeEnv answers every call with a function of the test's choosing; nil
// functions give a default (timestamps 10, 11, ...; a read of one row; an
// append that succeeds).
type fakeEnv struct {
	ts       uint64
	writeTS  func(ctx context.Context) (uint64, error)
	read     func(ctx context.Context, at uint64) (Payload[string], error)
	refold   func(ctx context.Context, p Payload[string], from, to uint64) (Payload[string], bool, error)
	append   func(ctx context.Context, t uint64, p Payload[string]) (AppendResult, error)
	apply    func(ctx context.Context, t uint64) error
	appends  int
	appliedT uint64
}

func (f *fakeEnv) WriteTS(ctx context.Context) (uint64, error) {
	if f.writeTS != nil {
		return f.writeTS(ctx)
	}
	f.ts = max(f.ts+1, 10)
	return f.ts, nil
}

func (f *fakeEnv) ApplyWrite(ctx context.Context, t uint64) error {
	if ctx.Err() != nil {
		return errors.New("ApplyWrite got a canceled context")
	}
	f.appliedT = t
	if f.apply != nil {
		return f.apply(ctx, t)
	}
	return nil
}

func (f *fakeEnv) Read(ctx context.Context, at uint64) (Payload[string], error) {
	if f.read != nil {
		return f.read(ctx, at)
	}
	return pl(1, "a", -1), nil
}

func (f *fakeEnv) Refold(ctx context.Context, p Payload[string], from, to uint64) (Payload[string], bool, error) {
	if f.refold != nil {
		return f.refold(ctx, p, from, to)
	}
	return p, true, nil
}

func (f *fakeEnv) Append(ctx context.Context, t uint64, p Payload[string]) (AppendResult, error) {
	f.appends++
	if f.append != nil {
		return f.append(ctx, t, p)
	}
	return AppendResult{OK: true}, nil
}

func (f *fakeEnv) env() Env[string] {
	return Env[string]{Oracle: f, Selection: f, Appender: f}
}

func TestRunSuccess(t *testing.T) {
	f := &fakeEnv{}
	res, err := Run(context.Background(), Config{}, Write[string]{}, f.env())
	if err != nil || !res.Committed || res.T != 10 || res.Rows != 1 || f.appliedT != 10 {
		t.Fatalf("got %+v, %v (applied %d)", res, err, f.appliedT)
	}
}

// TestRunCancelDuringAppend: the append is submitted, the statement is
// canceled, the append then succeeds: the client is told success.
func TestRunCancelDuringAppend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome AppendResult
		wantErr pgerr.Code
	}{
		{"success is reported", AppendResult{OK: true}, ""},
		{"conflict ends without retry", AppendResult{ActualUpper: 12}, pgerr.QueryCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			submitted, release := make(chan struct{}), make(chan struct{})
			f := &fakeEnv{append: func(ctx context.Context, _ uint64, _ Payload[string]) (AppendResult, error) {
				close(submitted)
				<-release // the backend answers later, whatever ctx does
				return tc.outcome, nil
			}}
			done := make(chan struct{})
			var (
				res Result
				err error
			)
			go func() {
				defer close(done)
				res, err = Run(ctx, Config{}, Write[string]{}, f.env())
			}()
			<-submitted
			cancel()
			close(release)
			<-done
			if got := codeOf(err); got != tc.wantErr {
				t.Fatalf("err %v, want code %q", err, tc.wantErr)
			}
			if f.appends != 1 {
				t.Errorf("appends = %d, want 1", f.appends)
			}
			if tc.outcome.OK && (!res.Committed || f.appliedT != res.T) {
				t.Errorf("result %+v, applied %d", res, f.appliedT)
			}
		})
	}
}

func codeOf(err error) pgerr.Code {
	if err == nil {
		return ""
	}
	return pgerr.Of(err)
}

// TestRunCancelBeforeAppend: whatever phase the cancel hits before the
// append is called, nothing is appended and the client gets 57014.
func TestRunCancelBeforeAppend(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(f *fakeEnv, cancel func())
	}{
		{"in WriteTS", func(f *fakeEnv, cancel func()) {
			f.writeTS = func(ctx context.Context) (uint64, error) { cancel(); return 0, ctx.Err() }
		}},
		{"after WriteTS returned", func(f *fakeEnv, cancel func()) {
			f.writeTS = func(ctx context.Context) (uint64, error) { cancel(); return 10, nil }
		}},
		{"in Read", func(f *fakeEnv, cancel func()) {
			f.read = func(ctx context.Context, _ uint64) (Payload[string], error) {
				cancel()
				return Payload[string]{}, ctx.Err()
			}
		}},
		{"after Read returned", func(f *fakeEnv, cancel func()) {
			f.read = func(ctx context.Context, _ uint64) (Payload[string], error) { cancel(); return pl(1, "a", 1), nil }
		}},
		{"in Refold", func(f *fakeEnv, cancel func()) {
			first := true
			f.append = func(context.Context, uint64, Payload[string]) (AppendResult, error) {
				if first {
					first = false
					return AppendResult{ActualUpper: 20}, nil
				}
				return AppendResult{OK: true}, nil
			}
			f.refold = func(ctx context.Context, p Payload[string], _, _ uint64) (Payload[string], bool, error) {
				cancel()
				return p, true, nil
			}
		}},
		{"in Append before submitting", func(f *fakeEnv, cancel func()) {
			f.append = func(ctx context.Context, _ uint64, _ Payload[string]) (AppendResult, error) {
				cancel() // say, while waiting for a connection
				return AppendResult{}, ctx.Err()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := &fakeEnv{}
			tc.set(f, cancel)
			appendFn := f.append
			var okAppends int
			f.append = func(ctx context.Context, t uint64, p Payload[string]) (AppendResult, error) {
				r := AppendResult{OK: true}
				var err error
				if appendFn != nil {
					r, err = appendFn(ctx, t, p)
				}
				if r.OK && err == nil {
					okAppends++
				}
				return r, err
			}
			res, err := Run(ctx, Config{}, Write[string]{}, f.env())
			if pgerr.Of(err) != pgerr.QueryCanceled {
				t.Fatalf("err %v, want 57014", err)
			}
			if okAppends != 0 || res.Committed || f.appliedT != 0 {
				t.Errorf("wrote something: %+v, %d ok appends", res, okAppends)
			}
		})
	}
}

func TestRunApplyError(t *testing.T) {
	f := &fakeEnv{apply: func(context.Context, uint64) error { return errBoom }}
	res, err := Run(context.Background(), Config{}, Write[string]{}, f.env())
	if !Committed(err) || !errors.Is(err, errBoom) || !res.Committed || res.T != 10 {
		t.Fatalf("got %+v, %v", res, err)
	}
}

func TestRunErrorsPassThrough(t *testing.T) {
	backend := pgerr.New(pgerr.UniqueViolation, "duplicate key value violates unique constraint \"t_pkey\"")
	f := &fakeEnv{append: func(context.Context, uint64, Payload[string]) (AppendResult, error) {
		return AppendResult{}, backend
	}}
	_, err := Run(context.Background(), Config{}, Write[string]{}, f.env())
	if err != backend {
		t.Fatalf("err %v, want the backend's error as is", err)
	}
	if f.appends != 1 {
		t.Errorf("appends = %d: an error is not retried", f.appends)
	}
}

func TestRunMetricsAndExhaustion(t *testing.T) {
	upper := uint64(0)
	f := &fakeEnv{append: func(_ context.Context, t uint64, _ Payload[string]) (AppendResult, error) {
		upper = t + 3 // someone always gets there first
		return AppendResult{ActualUpper: upper}, nil
	}}
	refolds := 0
	f.refold = func(_ context.Context, p Payload[string], from, to uint64) (Payload[string], bool, error) {
		refolds++
		return p, refolds%2 == 0, nil
	}
	var m Metrics
	env := f.env()
	env.Metrics = &m
	res, err := Run(context.Background(), Config{MaxAttempts: 4}, Write[string]{}, env)
	if pgerr.Of(err) != pgerr.SerializationFailure {
		t.Fatalf("err %v, want 40001", err)
	}
	want := Result{Attempts: 4, Conflicts: 4, Refolds: 1, Rereads: 2}
	if res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	if m.Writes.Load() != 1 || m.Conflicts.Load() != 4 || m.Retries.Load() != 3 || m.Refolds.Load() != 1 ||
		m.Rereads.Load() != 2 || m.Exhausted.Load() != 1 || m.Commits.Load() != 0 {
		t.Errorf("metrics %+v", &m)
	}
}

// TestRunSemaphore: a read-then-write waits for a slot; its deadline runs
// during the wait and is reported as a statement timeout in the phase
// "semaphore wait". Blind writes do not take the semaphore.
func TestRunSemaphore(t *testing.T) {
	sem := NewSemaphore(1)
	if _, err := sem.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &fakeEnv{}
	var m Metrics
	env := f.env()
	env.Sem, env.Metrics = sem, &m
	env.Budget = timeouts.NewBudget(time.Now(), time.Millisecond)
	ctx, cancel := timeouts.WithStatementDeadline(context.Background(), env.Budget.Deadline())
	defer cancel(nil)
	_, err := Run(ctx, Config{}, Write[string]{}, env)
	var in *timeouts.Interruption
	if pgerr.Of(err) != pgerr.QueryCanceled || !errors.As(err, &in) || in.Phase != timeouts.PhaseSemaphoreWait || in.Cause != timeouts.Timeout {
		t.Fatalf("err %v (%+v), want 57014 statement timeout in semaphore wait", err, in)
	}
	if f.appends != 0 || m.Waits.Load() != 1 || m.Canceled.Load() != 1 {
		t.Errorf("appends %d, metrics %+v", f.appends, &m)
	}
	if st := sem.Stats(); st.Waiting != 0 || st.Held != 1 {
		t.Errorf("semaphore %+v", st)
	}
	// A blind write goes through while the slot is held.
	env.Budget = nil
	if _, err := Run(context.Background(), Config{}, Write[string]{Blind: true, Payload: pl(1, "x", 1)}, env); err != nil {
		t.Fatal(err)
	}
	sem.Release()
	if _, err := Run(context.Background(), Config{}, Write[string]{}, env); err != nil {
		t.Fatal(err)
	}
	if st := sem.Stats(); st.Held != 0 {
		t.Errorf("semaphore %+v after Run", st)
	}
}
