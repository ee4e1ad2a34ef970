package occ

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/mzproxy/mzproxy/pgerr"
)

// TestGroupReplay runs the scripts under testdata/group against the pure
// group-commit core. Payloads are names. Commands:
//
//	group [max=N] [batch=N]            a new Group (MaxAttempts, MaxBatch)
//	submit name=A...                   arrivals, in order
//	withdraw name=A                    A's caller gives up
//	flush t=T                          form the batch at T
//	complete ok [apply-error]          the batch committed
//	complete upper=U [reject=A,B]      the batch was refused
//	abort                              the batch's append failed
func TestGroupReplay(t *testing.T) {
	datadriven.Walk(t, "testdata/group", func(t *testing.T, path string) {
		var (
			g       *Group[string]
			tickets = map[string]Ticket{}
			names   = map[Ticket]string{}
		)
		pending := func() string {
			var p []string
			for _, tk := range g.Pending() {
				p = append(p, names[tk])
			}
			return fmt.Sprintf("pending: [%s] in-flight: %v\n", strings.Join(p, " "), g.InFlight())
		}
		outcomes := func(outs []Outcome) string {
			var b strings.Builder
			for _, o := range outs {
				s := o.String()
				fmt.Fprintf(&b, "%s%s\n", names[o.Ticket], s[strings.Index(s, ":"):])
			}
			return b.String()
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var ints = map[string]int{}
			var strs = map[string][]string{}
			for _, a := range d.CmdArgs {
				strs[a.Key] = a.Vals
				if len(a.Vals) == 1 {
					if n, err := strconv.Atoi(a.Vals[0]); err == nil {
						ints[a.Key] = n
					}
				}
			}
			switch d.Cmd {
			case "group":
				g = NewGroup[string](GroupConfig{MaxAttempts: ints["max"], MaxBatch: ints["batch"]})
				return pending()
			case "submit":
				for _, n := range strs["name"] {
					tk := g.Submit(n)
					tickets[n], names[tk] = tk, n
				}
				return pending()
			case "withdraw":
				ok := g.Withdraw(tickets[strs["name"][0]])
				return fmt.Sprintf("withdrawn: %v\n", ok) + pending()
			case "flush":
				b, ok := g.Flush(uint64(ints["t"]))
				if !ok {
					return "no batch\n" + pending()
				}
				return fmt.Sprintf("batch T=%d %v\n", b.T, b.Payloads) + pending()
			case "complete":
				var r BatchResult
				var applyErr error
				if d.HasArg("ok") {
					r.OK = true
				}
				if d.HasArg("apply-error") {
					applyErr = errBoom
				}
				r.ActualUpper = uint64(ints["upper"])
				if rej := strs["reject"]; len(rej) > 0 {
					// Errs is indexed like the batch in flight.
					r.Errs = make([]error, len(g.inflight.Payloads))
					for i, p := range g.inflight.Payloads {
						for _, n := range rej {
							if n == p {
								r.Errs[i] = pgerr.New(pgerr.UniqueViolation, "duplicate key value violates unique constraint")
							}
						}
					}
				}
				return outcomes(g.Complete(r, applyErr)) + pending()
			case "abort":
				return outcomes(g.Abort(errBoom)) + pending()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// blockingBatch is a BatchAppender over a simEnv whose appends wait for
// the test: each AppendBatch announces its batch and waits for a release.
type blockingBatch struct {
	env     *simEnv
	batches chan []Payload[string]
	release chan struct{}
}

func (b *blockingBatch) AppendBatch(ctx context.Context, t uint64, ps []Payload[string]) (BatchResult, error) {
	b.batches <- ps
	<-b.release
	return b.env.AppendBatch(ctx, t, ps)
}

// TestCommitterBatches: while one batch is in flight, later arrivals queue
// and ride the next batch together; a caller canceled while queued leaves
// without writing; a caller canceled while its batch is in flight waits
// and is told the truth; leadership passes on when the leader is done.
func TestCommitterBatches(t *testing.T) {
	env := &simEnv{s: newSimStore()}
	ba := &blockingBatch{env: env, batches: make(chan []Payload[string]), release: make(chan struct{})}
	var m Metrics
	c := NewCommitter[Payload[string]](GroupConfig{}, env, ba, &m)

	type res struct {
		t   uint64
		err error
	}
	start := func(ctx context.Context, row string) chan res {
		ch := make(chan res, 1)
		go func() {
			ts, err := c.Commit(ctx, Payload[string]{Updates: ups(row, 1), Rows: 1})
			ch <- res{ts, err}
		}()
		return ch
	}
	queued := func(n int) {
		waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.g.Pending()) == n })
	}

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	a := start(ctxA, "a") // leader
	if got := <-ba.batches; len(got) != 1 {
		t.Fatalf("first batch %v", got)
	}
	cancelA() // a's batch is in flight: a waits for it
	b := start(context.Background(), "b")
	queued(1)
	ctxC, cancelC := context.WithCancel(context.Background())
	cc := start(ctxC, "c")
	queued(2)
	d := start(context.Background(), "d")
	queued(3)
	cancelC() // c is queued: it leaves
	if r := <-cc; pgerr.Of(r.err) != pgerr.QueryCanceled {
		t.Fatalf("c: %+v", r)
	}
	queued(2)
	if n := c.Queued(); n != 2 {
		t.Fatalf("Queued() = %d with b and d waiting", n)
	}
	ba.release <- struct{}{}
	if r := <-a; r.err != nil || r.t == 0 {
		t.Fatalf("a: %+v (canceled in flight, committed: must report success)", r)
	}
	// b leads now; b and d ride one batch.
	if got := <-ba.batches; len(got) != 2 {
		t.Fatalf("second batch %v", got)
	}
	ba.release <- struct{}{}
	rb, rd := <-b, <-d
	if rb.err != nil || rd.err != nil || rb.t != rd.t || rb.t <= 0 {
		t.Fatalf("b %+v d %+v", rb, rd)
	}
	if got, want := canonical(env.s.cur), "{+a, +b, +d}"; got != want {
		t.Errorf("store %s, want %s", got, want)
	}
	if m.Batches.Load() != 2 || m.Batched.Load() != 3 {
		t.Errorf("metrics %+v", &m)
	}
}

// TestCommitterReject: a payload that fails on its own fails only its
// caller; the others retry in the next batch.
func TestCommitterReject(t *testing.T) {
	env := &simEnv{s: newSimStore()}
	env.reject = func(p Payload[string]) error {
		if p.Updates[0].Row == "bad" {
			return pgerr.New(pgerr.UniqueViolation, "duplicate key value violates unique constraint")
		}
		return nil
	}
	ba := &blockingBatch{env: env, batches: make(chan []Payload[string]), release: make(chan struct{})}
	c := NewCommitter[Payload[string]](GroupConfig{}, env, ba, nil)
	var wg sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	commit := func(row string) {
		defer wg.Done()
		_, err := c.Commit(context.Background(), Payload[string]{Updates: ups(row, 1), Rows: 1})
		mu.Lock()
		errs[row] = err
		mu.Unlock()
	}
	wg.Add(1)
	go commit("first")
	<-ba.batches // first in flight; the next three queue behind it
	for _, r := range []string{"x", "bad", "y"} {
		wg.Add(1)
		go commit(r)
	}
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.g.Pending()) == 3 })
	ba.release <- struct{}{}
	if got := <-ba.batches; len(got) != 3 {
		t.Fatalf("batch %v", got)
	}
	ba.release <- struct{}{}
	if got := <-ba.batches; len(got) != 2 {
		t.Fatalf("retry batch %v", got)
	}
	ba.release <- struct{}{}
	wg.Wait()
	if errs["first"] != nil || errs["x"] != nil || errs["y"] != nil || pgerr.Of(errs["bad"]) != pgerr.UniqueViolation {
		t.Fatalf("errs %v", errs)
	}
	if got, want := canonical(env.s.cur), "{+first, +x, +y}"; got != want {
		t.Errorf("store %s, want %s", got, want)
	}
}

// gateOracle blocks WriteTS until the test opens the gate or ctx ends.
type gateOracle struct {
	*simEnv
	gate    chan struct{}
	waiting chan struct{}
}

func (o *gateOracle) WriteTS(ctx context.Context) (uint64, error) {
	o.waiting <- struct{}{}
	select {
	case <-o.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return o.simEnv.WriteTS(ctx)
}

// TestCommitterLeaderCanceled: a leader whose context ends before its
// batch is cut leaves with nothing written and hands leadership to the
// oldest queued caller, which then commits the rest.
func TestCommitterLeaderCanceled(t *testing.T) {
	env := &simEnv{s: newSimStore()}
	o := &gateOracle{simEnv: env, gate: make(chan struct{}), waiting: make(chan struct{})}
	c := NewCommitter[Payload[string]](GroupConfig{}, o, env, nil)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := c.Commit(ctxA, Payload[string]{Updates: ups("a", 1), Rows: 1})
		errA <- err
	}()
	<-o.waiting // a leads and waits for a timestamp
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, row := range []string{"b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Commit(context.Background(), Payload[string]{Updates: ups(row, 1), Rows: 1})
		}()
		waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.g.Pending()) == i+2 })
	}
	cancelA()
	if err := <-errA; pgerr.Of(err) != pgerr.QueryCanceled {
		t.Fatalf("a: %v", err)
	}
	<-o.waiting // b leads now
	close(o.gate)
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("b, c: %v", errs)
	}
	if len(env.s.log) != 1 || canonical(env.s.cur) != "{+b, +c}" {
		t.Errorf("store %s", env.s)
	}
}
