package occ

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkMachineHappyPath is the core's cost per uncontended write:
// allocate, read, append, apply.
func BenchmarkMachineHappyPath(b *testing.B) {
	b.ReportAllocs()
	p := pl(1, "a", -1, "b", 1)
	for i := 0; i < b.N; i++ {
		m := NewMachine(Config{}, Write[string]{})
		m.Step(evTS(uint64(i + 1)))
		m.Step(evRead(p))
		m.Step(evOK())
		if a := m.Step(evApplied()); a.Kind != ActDone {
			b.Fatal(a)
		}
	}
}

func BenchmarkRunHappyPath(b *testing.B) {
	b.ReportAllocs()
	f := &fakeEnv{}
	env := f.env()
	env.Sem, env.Metrics = NewSemaphore(4), &Metrics{}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if _, err := Run(ctx, Config{}, Write[string]{}, env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkConsolidate(b *testing.B) {
	in := make([]Update[string], 0, 200)
	for i := range 100 {
		r := strconv.Itoa(i % 60)
		in = append(in, Update[string]{Row: r, Diff: 1}, Update[string]{Row: r + "'", Diff: -1})
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Consolidate(in, id)
	}
}
