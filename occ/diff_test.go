package occ

import (
	"errors"
	"testing"
)

func id(s string) string { return s }

func ups(args ...any) []Update[string] {
	var out []Update[string]
	for i := 0; i < len(args); i += 2 {
		out = append(out, Update[string]{Row: args[i].(string), Diff: int64(args[i+1].(int))})
	}
	return out
}

func TestConsolidate(t *testing.T) {
	for _, tc := range []struct {
		in   []Update[string]
		want string
	}{
		{nil, "{}"},
		{ups("a", 1), "{+a}"},
		{ups("a", 1, "a", -1), "{}"},
		{ups("a", 1, "b", 2, "a", 1), "{+a×2, +b×2}"},
		{ups("b", -1, "a", 1, "b", -1, "c", 0), "{-b×2, +a}"},
		{ups("a", 3, "b", 1, "a", -3, "b", -1, "c", 1), "{+c}"},
	} {
		in := append([]Update[string](nil), tc.in...)
		if got := FormatUpdates(Consolidate(tc.in, id)); got != tc.want {
			t.Errorf("Consolidate(%s) = %s, want %s", FormatUpdates(in), got, tc.want)
		}
		if FormatUpdates(tc.in) != FormatUpdates(in) {
			t.Errorf("Consolidate modified its input")
		}
	}
}

func TestDiff(t *testing.T) {
	before := ups("a", 2, "b", 1)
	after := ups("a", 1, "c", 1, "b", 1)
	if got, want := FormatUpdates(Diff(before, after, id)), "{-a, +c}"; got != want {
		t.Errorf("Diff = %s, want %s", got, want)
	}
}

func TestMultisetApply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start []Update[string]
		apply []Update[string]
		want  string
		err   bool
	}{
		{"insert", nil, ups("a", 1, "a", 1), "{+a×2}", false},
		{"delete one duplicate", ups("a", 2), ups("a", -1), "{+a}", false},
		{"delete all duplicates", ups("a", 2, "b", 1), ups("a", -2), "{+b}", false},
		{"over-delete", ups("a", 2), ups("a", -3), "{+a×2}", true},
		{"over-delete is atomic", ups("a", 1, "b", 1), ups("a", -1, "b", -2), "{+a, +b}", true},
		{"absent row", nil, ups("x", -1), "{}", true},
		{"net zero within payload", ups("a", 1), ups("a", -2, "a", 1), "{}", false},
		{"reinsert keeps first order", ups("a", 1, "b", 1), ups("a", -1, "a", 1), "{+a, +b}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMultiset[string](id)
			if err := m.Apply(tc.start); err != nil {
				t.Fatal(err)
			}
			err := m.Apply(tc.apply)
			var od *OverDeleteError
			if got := errors.As(err, &od); got != tc.err {
				t.Fatalf("Apply err = %v, want over-delete %v", err, tc.err)
			}
			if got := m.String(); got != tc.want {
				t.Errorf("state = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMultisetClone(t *testing.T) {
	m := NewMultiset[string](id)
	_ = m.Apply(ups("a", 2))
	c := m.Clone()
	_ = c.Apply(ups("a", -2, "b", 1))
	if m.String() != "{+a×2}" || c.String() != "{+b}" || c.Len() != 1 || m.Count("a") != 2 {
		t.Errorf("clone not independent: %s %s", m, c)
	}
}
