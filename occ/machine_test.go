package occ

import (
	"errors"
	"strings"
	"testing"

	"github.com/mzproxy/mzproxy/pgerr"
)

func pl(rows int64, args ...any) Payload[string] {
	return Payload[string]{Updates: ups(args...), Rows: rows}
}

var (
	errBoom   = errors.New("boom")
	errCancel = pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")
)

func evTS(ts uint64) Event[string]           { return Event[string]{Kind: EvTimestamp, TS: ts} }
func evRead(p Payload[string]) Event[string] { return Event[string]{Kind: EvRead, Payload: p} }
func evRefold(p Payload[string], ok bool) Event[string] {
	return Event[string]{Kind: EvRefolded, Payload: p, OK: ok}
}
func evOK() Event[string] { return Event[string]{Kind: EvAppended, Append: AppendResult{OK: true}} }
func evConflict(upper uint64) Event[string] {
	return Event[string]{Kind: EvAppended, Append: AppendResult{ActualUpper: upper}}
}
func evApplied() Event[string]      { return Event[string]{Kind: EvApplied} }
func evErr(err error) Event[string] { return Event[string]{Kind: EvError, Err: err} }
func evCancel() Event[string]       { return Event[string]{Kind: EvCancel, Err: errCancel} }

// TestMachineTransitions checks each transition: the action after the
// last event of a sequence, starting from a fresh machine.
func TestMachineTransitions(t *testing.T) {
	rw := Write[string]{}
	blind := Write[string]{Blind: true, Payload: pl(1, "x", 1)}
	for _, tc := range []struct {
		name   string
		w      Write[string]
		cfg    Config
		events []Event[string]
		want   string
	}{
		{"start", rw, Config{}, nil, "allocate"},
		{"timestamp -> read at T-1", rw, Config{}, []Event[string]{evTS(10)}, "read at=9"},
		{"timestamp 0 -> target 1", rw, Config{}, []Event[string]{evTS(0)}, "read at=0"},
		{"read -> append", rw, Config{}, []Event[string]{evTS(10), evRead(pl(1, "a", -1, "b", 1))},
			"append T=10 {-a, +b} rows=1"},
		{"blind skips read", blind, Config{}, []Event[string]{evTS(10)}, "append T=10 {+x} rows=1"},
		{"append ok -> apply", rw, Config{}, []Event[string]{evTS(10), evRead(pl(1, "a", -1)), evOK()}, "apply T=10"},
		{"applied -> done", rw, Config{}, []Event[string]{evTS(10), evRead(pl(1, "a", -1)), evOK(), evApplied()},
			"done T=10 rows=1 attempts=1 conflicts=0 refolds=0 rereads=0"},
		{"conflict -> allocate", rw, Config{}, []Event[string]{evTS(10), evRead(pl(1)), evConflict(13)}, "allocate"},
		{"lagging oracle is raised to the actual upper", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(13), evTS(11)}, "refold [10,13) {}"},
		{"oracle ahead of the upper", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(13), evTS(20)}, "refold [10,20) {}"},
		{"refold -> append", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1, "a", -1)), evConflict(13), evTS(13), evRefold(pl(2, "a", -2), true)},
			"append T=13 {-a×2} rows=2"},
		{"refold impossible -> re-read", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(13), evTS(13), evRefold(Payload[string]{}, false)},
			"read at=12"},
		{"blind conflict retries same payload", blind, Config{},
			[]Event[string]{evTS(10), evConflict(12), evTS(5)}, "append T=12 {+x} rows=1"},
		{"budget exhausted", rw, Config{MaxAttempts: 2},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(11), evTS(11), evRefold(pl(1), true), evConflict(12)},
			"fail 40001 " + RetriesExhaustedMessage},
		{"conflict upper not past T is a bug", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(10)}, "fail XX000 occ: append at 10 refused with upper 10, which would have admitted it"},
		{"oracle error", rw, Config{}, []Event[string]{evErr(errBoom)}, "fail boom"},
		{"read error", rw, Config{}, []Event[string]{evTS(3), evErr(errBoom)}, "fail boom"},
		{"refold error", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(13), evTS(13), evErr(errBoom)}, "fail boom"},
		{"append error: nothing written", rw, Config{}, []Event[string]{evTS(3), evRead(pl(1)), evErr(errBoom)}, "fail boom"},
		{"apply error: committed", rw, Config{}, []Event[string]{evTS(3), evRead(pl(1)), evOK(), evErr(errBoom)},
			"fail occ: write committed at 3, but the oracle could not apply it: boom (committed)"},
		{"cancel while allocating", rw, Config{}, []Event[string]{evCancel()}, "fail 57014 canceling statement due to user request"},
		{"cancel while reading", rw, Config{}, []Event[string]{evTS(3), evCancel()}, "fail 57014 canceling statement due to user request"},
		{"cancel while refolding", rw, Config{},
			[]Event[string]{evTS(10), evRead(pl(1)), evConflict(13), evTS(13), evCancel()}, "fail 57014 canceling statement due to user request"},
		{"cancel during append waits", rw, Config{}, []Event[string]{evTS(3), evRead(pl(1)), evCancel()}, "append T=3 {} rows=1"},
		{"cancel during append, then success", rw, Config{},
			[]Event[string]{evTS(3), evRead(pl(1)), evCancel(), evOK()}, "apply T=3"},
		{"cancel during append, success reported", rw, Config{},
			[]Event[string]{evTS(3), evRead(pl(1)), evCancel(), evOK(), evApplied()},
			"done T=3 rows=1 attempts=1 conflicts=0 refolds=0 rereads=0"},
		{"cancel during append, conflict: no retry", rw, Config{},
			[]Event[string]{evTS(3), evRead(pl(1)), evCancel(), evConflict(5)}, "fail 57014 canceling statement due to user request"},
		{"cancel during apply is ignored", rw, Config{},
			[]Event[string]{evTS(3), evRead(pl(1)), evOK(), evCancel()}, "apply T=3"},
		{"stray event", rw, Config{}, []Event[string]{evOK()}, "fail XX000 occ: event appended does not answer action allocate"},
		{"stray event during append keeps waiting", rw, Config{},
			[]Event[string]{evTS(3), evRead(pl(1)), evTS(4)}, "append T=3 {} rows=1"},
		{"terminal is sticky", rw, Config{}, []Event[string]{evErr(errBoom), evTS(3)}, "fail boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMachine(tc.cfg, tc.w)
			a := m.Action()
			for _, e := range tc.events {
				a = m.Step(e)
			}
			if got := a.String(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if a.String() != m.Action().String() {
				t.Errorf("Step returned %s, Action() %s", a, m.Action())
			}
		})
	}
}

func TestRetriesExhaustedError(t *testing.T) {
	m := NewMachine(Config{MaxAttempts: 1}, Write[string]{Blind: true})
	m.Step(evTS(1))
	a := m.Step(evConflict(2))
	var e *pgerr.Error
	if !errors.As(a.Err, &e) {
		t.Fatalf("err %T, want *pgerr.Error", a.Err)
	}
	if e.Code != pgerr.SerializationFailure || !strings.HasPrefix(e.Message, RetriesExhaustedMessage) || e.Hint == "" {
		t.Errorf("got %+v", e)
	}
	if a.Result.Committed || a.Result.Attempts != 1 || a.Result.Conflicts != 1 {
		t.Errorf("result %+v", a.Result)
	}
}

func TestConfigDefault(t *testing.T) {
	m := NewMachine(Config{}, Write[string]{Blind: true})
	a := m.Action()
	n := 0
	for ts := uint64(1); !a.Terminal(); ts++ {
		if a = m.Step(evTS(ts)); a.Kind == ActAppend {
			n++
			a = m.Step(evConflict(ts + 1))
		}
	}
	if n != DefaultMaxAttempts {
		t.Errorf("attempts = %d, want %d", n, DefaultMaxAttempts)
	}
}

// TestMachineAllocateAfterConflict checks what the machine tells its
// driver for the next attempt after a conflict: the floor (the actual
// upper), and whether to wait for the lock's holder first (a busy
// conflict); and what it has done so far, before it ends.
func TestMachineAllocateAfterConflict(t *testing.T) {
	m := NewMachine(Config{MaxAttempts: 5}, Write[string]{})
	if a := m.Action(); a.Kind != ActAllocate || a.Floor != 0 || a.Wait {
		t.Fatalf("first action: %+v", a)
	}
	m.Step(evTS(5))
	m.Step(evRead(pl(1)))
	a := m.Step(Event[string]{Kind: EvAppended, Append: AppendResult{ActualUpper: 8, Busy: true}})
	if a.Kind != ActAllocate || a.Floor != 8 || !a.Wait {
		t.Fatalf("after a busy conflict: %+v", a)
	}
	m.Step(evTS(8))
	m.Step(evRefold(Payload[string]{}, false))
	m.Step(evRead(pl(1)))
	a = m.Step(evConflict(11))
	if a.Kind != ActAllocate || a.Floor != 11 || a.Wait {
		t.Fatalf("after a plain conflict: %+v", a)
	}
	if r := m.Result(); r.Attempts != 2 || r.Conflicts != 2 || r.Rereads != 1 || r.Committed {
		t.Fatalf("result so far: %+v", r)
	}
}
