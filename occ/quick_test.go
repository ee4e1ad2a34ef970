package occ

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/mzproxy/mzproxy/pgerr"
)

var quickSeeds = flag.Int("occ.seeds", 2000, "seeds for the randomized serial-model checks")

var simNames = []string{"inc", "inc", "delx", "snap", "insx", "insx"}

// outcome is how one simulated writer ended.
type outcome struct {
	name string
	res  Result
	err  error
	max  int
}

// checkOutcomes checks what the writers were told against the store:
// a writer was told success if and only if its payload is in the log
// exactly once, with the rows it reported; a failure wrote nothing; no
// over-delete; 40001 only after the whole budget; reported rows add up.
func checkOutcomes(s *simStore, outs []outcome) error {
	logged := map[string][]simCommit{}
	var loggedRows int64
	for _, c := range s.log {
		logged[c.writer] = append(logged[c.writer], c)
		loggedRows += c.rows
	}
	var told int64
	for _, o := range outs {
		cs := logged[o.name]
		var od *OverDeleteError
		switch {
		case errors.As(o.err, &od):
			return fmt.Errorf("%s: over-delete: %v", o.name, o.err)
		case len(cs) > 1:
			return fmt.Errorf("%s: committed %d times", o.name, len(cs))
		case o.err == nil && len(cs) != 1:
			return fmt.Errorf("%s: told success, not in the log", o.name)
		case o.err == nil && (cs[0].t != o.res.T || cs[0].rows != o.res.Rows):
			return fmt.Errorf("%s: told T=%d rows=%d, log has T=%d rows=%d", o.name, o.res.T, o.res.Rows, cs[0].t, cs[0].rows)
		case o.err != nil && len(cs) != 0:
			return fmt.Errorf("%s: told %v, but committed at %d", o.name, o.err, cs[0].t)
		case o.err != nil && o.res.Committed:
			return fmt.Errorf("%s: failed with a committed result", o.name)
		case pgerr.Of(o.err) == pgerr.SerializationFailure && o.res.Attempts != o.max:
			return fmt.Errorf("%s: 40001 after %d of %d attempts", o.name, o.res.Attempts, o.max)
		}
		if o.err == nil {
			told += o.res.Rows
		} else if c := pgerr.Of(o.err); c != pgerr.SerializationFailure && c != pgerr.QueryCanceled {
			return fmt.Errorf("%s: unexpected error %v", o.name, o.err)
		}
	}
	if told != loggedRows {
		return fmt.Errorf("rows told %d, rows committed %d", told, loggedRows)
	}
	return nil
}

// TestQuickStepwise interleaves N simulated writers one action at a time,
// in an order drawn from a seed, with cancels at random points (before the
// append, and while it is in flight) and oracle jumps, and checks the
// outcome against the serial model. A failure prints the seed; rerun one
// with -run 'TestQuickStepwise/seed=N$'.
func TestQuickStepwise(t *testing.T) {
	var cov coverage
	for seed := 0; seed < *quickSeeds; seed++ {
		if err := simulateStepwise(uint64(seed), &cov); err != nil {
			t.Fatalf("seed=%d: %v", seed, err)
		}
	}
	// The generator must reach every path it claims to check.
	if *quickSeeds >= 100 && (cov.conflicts == 0 || cov.refolds == 0 || cov.rereads == 0 || cov.exhausted == 0 ||
		cov.canceledEarly == 0 || cov.inFlightCommitted == 0 || cov.inFlightLost == 0) {
		t.Errorf("coverage too thin: %+v", cov)
	}
	t.Logf("%+v", cov)
}

type coverage struct {
	writers, commits, conflicts, refolds, rereads, exhausted int
	canceledEarly, inFlightCommitted, inFlightLost           int
}

func simulateStepwise(seed uint64, cov *coverage) error {
	rng := rand.New(rand.NewPCG(seed, 0x0cc))
	s := newSimStore("c:0", "c:100", "d:x", "d:x", "d:x", "d:y")
	type writer struct {
		name string
		sel  simSel
		m    *Machine[string]
		max  int
		// canceled while its append was in flight
		inFlightCancel bool
	}
	var active []*writer
	sels := map[string]simSel{}
	for i := range 2 + rng.IntN(7) {
		sel := simSels[simNames[rng.IntN(len(simNames))]]
		w := &writer{name: fmt.Sprintf("w%d-%s", i, sel.name), sel: sel, max: 1 + rng.IntN(5)}
		w.m = NewMachine(Config{MaxAttempts: w.max}, sel.write())
		active = append(active, w)
		sels[w.name] = sel
	}
	cancelErr := pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")
	var outs []outcome
	for len(active) > 0 {
		i := rng.IntN(len(active))
		w := active[i]
		a := w.m.Action()
		var e Event[string]
		switch r := rng.IntN(100); {
		case r < 4:
			e = Event[string]{Kind: EvCancel, Err: cancelErr}
			w.inFlightCancel = w.inFlightCancel || a.Kind == ActAppend
		case r < 6 && a.Kind == ActAppend:
			// Canceled before the driver called the append.
			e = Event[string]{Kind: EvError, Err: cancelErr}
		case r < 10:
			s.writeTS += uint64(rng.IntN(5)) // the wall clock jumps
			continue
		default:
			e = exec(s, w.name, w.sel, a)
		}
		if a = w.m.Step(e); a.Terminal() {
			outs = append(outs, outcome{name: w.name, res: a.Result, err: a.Err, max: w.max})
			active = append(active[:i], active[i+1:]...)
			cov.writers++
			cov.conflicts += a.Result.Conflicts
			cov.refolds += a.Result.Refolds
			cov.rereads += a.Result.Rereads
			switch code := pgerr.Of(a.Err); {
			case a.Err == nil:
				cov.commits++
				if w.inFlightCancel {
					cov.inFlightCommitted++
				}
			case code == pgerr.SerializationFailure:
				cov.exhausted++
			case w.inFlightCancel:
				cov.inFlightLost++
			case code == pgerr.QueryCanceled:
				cov.canceledEarly++
			}
		}
	}
	if err := checkSerial(s, sels); err != nil {
		return fmt.Errorf("%v\n%s", err, s)
	}
	if err := checkOutcomes(s, outs); err != nil {
		return fmt.Errorf("%v\n%s", err, s)
	}
	return nil
}

// TestQuickRun runs writers as goroutines through Run against the
// simulated store behind a lock, with a semaphore and contexts canceled at
// random moments, and checks the same invariants and the metrics.
func TestQuickRun(t *testing.T) {
	seeds := max(*quickSeeds/10, 1)
	for seed := 0; seed < seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x0cc))
		env := &simEnv{s: newSimStore("c:0", "d:x", "d:x", "d:x", "d:y")}
		sem := NewSemaphore(1 + rng.IntN(3))
		var metrics Metrics
		n := 2 + rng.IntN(10)
		outs := make([]outcome, n)
		sels := map[string]simSel{}
		var wg sync.WaitGroup
		for i := range n {
			sel := simSels[simNames[rng.IntN(len(simNames))]]
			name := fmt.Sprintf("w%d-%s", i, sel.name)
			sels[name] = sel
			maxAttempts := 1 + rng.IntN(5)
			cancelAfter := -1
			if rng.IntN(4) == 0 {
				cancelAfter = rng.IntN(4) // yields before the cancel
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if cancelAfter >= 0 {
					go func() {
						for range cancelAfter {
							runtime.Gosched()
						}
						cancel()
					}()
				}
				e := env.runEnv(name, sel)
				e.Sem, e.Metrics = sem, &metrics
				res, err := Run(ctx, Config{MaxAttempts: maxAttempts}, sel.write(), e)
				outs[i] = outcome{name: name, res: res, err: err, max: maxAttempts}
			}()
		}
		wg.Wait()
		if err := checkSerial(env.s, sels); err != nil {
			t.Fatalf("seed=%d: %v\n%s", seed, err, env.s)
		}
		if err := checkOutcomes(env.s, outs); err != nil {
			t.Fatalf("seed=%d: %v\n%s", seed, err, env.s)
		}
		if got, want := metrics.Commits.Load(), int64(len(env.s.log)); got != want {
			t.Fatalf("seed=%d: metrics commits %d, log %d", seed, got, want)
		}
		if got := metrics.Writes.Load(); got != int64(n) {
			t.Fatalf("seed=%d: metrics writes %d, want %d", seed, got, n)
		}
		if st := sem.Stats(); st.Held != 0 || st.Waiting != 0 {
			t.Fatalf("seed=%d: semaphore left %+v", seed, st)
		}
	}
}
