package planner

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/mzproxy/mzproxy/pgerr"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPlan runs the golden files under testdata/plan. Commands:
//
//	catalog            define objects (see fakeCatalog.define)
//	plan [history] [path=a,b]   plan the input, print each statement
//
// Regenerate with: go test ./planner -run TestPlan -rewrite
func TestPlan(t *testing.T) {
	datadriven.Walk(t, "testdata/plan", func(t *testing.T, path string) {
		cat := newFakeCatalog()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "catalog":
				if err := cat.define(d.Input); err != nil {
					t.Fatal(err)
				}
				return ""
			case "plan":
				opts := Options{SearchPath: []string{"$user", "public"}}
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "history":
						opts.ExplicitTimestamp = true
					case "path":
						opts.SearchPath = a.Vals
					default:
						t.Fatalf("unknown argument %s", a.Key)
					}
				}
				stmts, err := New(0).Plan(d.Input, cat, opts)
				if err != nil {
					return formatErr(err)
				}
				var b strings.Builder
				for i, s := range stmts {
					if len(stmts) > 1 {
						fmt.Fprintf(&b, "-- statement %d\n", i+1)
					}
					formatStatement(&b, s, "")
				}
				return b.String()
			}
			t.Fatalf("unknown command %s", d.Cmd)
			return ""
		})
	})
}

func formatErr(err error) string {
	pe := pgerr.As(err)
	s := fmt.Sprintf("error %s: %s", pe.Code, pe.Message)
	if p, ok := pe.Extra['P']; ok {
		s += " (position " + p + ")"
	}
	if errors.Is(err, ErrSyntax) {
		s += " [syntax]"
	}
	if pe.Hint != "" {
		s += "\nhint: " + pe.Hint
	}
	return s + "\n"
}

func formatRefs(refs []Ref) string {
	var parts []string
	for _, r := range refs {
		s := QualifiedName{r.Schema, r.Name}.String()
		if r.Object != nil {
			s += fmt.Sprintf("=%s#%d", r.Object.Kind, r.Object.ID)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func formatStatement(b *strings.Builder, s *Statement, indent string) {
	fmt.Fprintf(b, "%skind=%s tag=%q params=%d", indent, s.Kind, s.Tag, s.Params)
	if s.UsesMzNow {
		b.WriteString(" mz_now")
	}
	if s.Locking {
		b.WriteString(" locking")
	}
	if s.CopyFromStdin {
		b.WriteString(" copy-from-stdin")
	}
	b.WriteString("\n")
	if s.SQL != "" {
		fmt.Fprintf(b, "%ssql: %s\n", indent, s.SQL)
	}
	if s.AsOf != nil {
		fmt.Fprintf(b, "%sas of: %s (at least: %v)\n", indent, s.AsOf.Expr, s.AsOf.AtLeast)
		formatAsOf(b, s.AsOf, indent)
	}
	if len(s.Reads) > 0 {
		fmt.Fprintf(b, "%sreads: %s\n", indent, formatRefs(s.Reads))
	}
	if len(s.Writes) > 0 {
		fmt.Fprintf(b, "%swrites: %s\n", indent, formatRefs(s.Writes))
	}
	if len(s.Inputs) > 0 {
		var ids []string
		for _, o := range s.Inputs {
			ids = append(ids, fmt.Sprintf("%s.%s#%d", o.Schema, o.Name, o.ID))
		}
		fmt.Fprintf(b, "%sinputs: %s\n", indent, strings.Join(ids, " "))
	}
	if s.Retention != nil {
		if s.Retention.Reset {
			fmt.Fprintf(b, "%sretention: reset\n", indent)
		} else {
			fmt.Fprintf(b, "%sretention: %s\n", indent, s.Retention.Duration)
		}
	}
	if t := s.Txn; t != nil {
		fmt.Fprintf(b, "%stxn: %s", indent, t.Kind)
		if t.Options.Isolation != "" {
			fmt.Fprintf(b, " isolation=%q", t.Options.Isolation)
		}
		if t.Options.ReadOnly != nil {
			fmt.Fprintf(b, " read_only=%v", *t.Options.ReadOnly)
		}
		if t.Options.Deferrable != nil {
			fmt.Fprintf(b, " deferrable=%v", *t.Options.Deferrable)
		}
		if t.Savepoint != "" {
			fmt.Fprintf(b, " savepoint=%s", t.Savepoint)
		}
		if t.GID != "" {
			fmt.Fprintf(b, " gid=%s", t.GID)
		}
		if t.Chain {
			b.WriteString(" chain")
		}
		b.WriteString("\n")
	}
	if v := s.Var; v != nil {
		fmt.Fprintf(b, "%svar: %s values=%q default=%v local=%v", indent, v.Name, v.Values, v.Default, v.Local)
		if v.Txn != nil {
			fmt.Fprintf(b, " isolation=%q", v.Txn.Isolation)
			if v.Txn.ReadOnly != nil {
				fmt.Fprintf(b, " read_only=%v", *v.Txn.ReadOnly)
			}
		}
		b.WriteString("\n")
	}
	if c := s.Cursor; c != nil {
		fmt.Fprintf(b, "%scursor: %q declare=%v move=%v close=%v hold=%v\n", indent, c.Name, c.Declare, c.Move, c.Close, c.Hold)
	}
	if s.Inner != nil {
		fmt.Fprintf(b, "%sinner: kind=%s tag=%q\n", indent, s.Inner.Kind, s.Inner.Tag)
		if s.Kind == KindSubscribe && s.Inner.Template != nil {
			fmt.Fprintf(b, "%sinner template: %s\n", indent, s.Inner.Template.Render("«ts»"))
		}
	}
	if e := s.ExplainTimestamp; e != nil {
		fmt.Fprintf(b, "%sexplain timestamp (%s) for:\n", indent, e.Format)
		formatStatement(b, e.Inner, indent+"  ")
	}
	if sub := s.Subscribe; sub != nil {
		if sub.Object != nil {
			fmt.Fprintf(b, "%ssubscribe object: %s\n", indent, sub.Object)
		}
		for _, o := range sub.Options {
			fmt.Fprintf(b, "%ssubscribe option: %s=%q\n", indent, o.Name, o.Value)
		}
		if sub.AsOf != nil {
			fmt.Fprintf(b, "%ssubscribe as of: %s (at least: %v)\n", indent, sub.AsOf.Expr, sub.AsOf.AtLeast)
		}
		if sub.CopyTo != "" {
			fmt.Fprintf(b, "%ssubscribe copy to: %s\n", indent, sub.CopyTo)
		}
		if sub.UpTo != "" {
			fmt.Fprintf(b, "%ssubscribe up to: %s\n", indent, sub.UpTo)
		}
		if sub.Query != nil {
			fmt.Fprintf(b, "%ssubscribe query:\n", indent)
			formatStatement(b, sub.Query, indent+"  ")
		}
	}
	if t := s.Template; t != nil {
		fmt.Fprintf(b, "%stemplate ($%d, %d holes): %s\n", indent, t.Param(), t.Holes(), t.Render("«ts»"))
	}
}

// formatAsOf prints what analyzeAsOf found in an AS OF expression.
func formatAsOf(b *strings.Builder, a *AsOf, indent string) {
	if a.Param > 0 {
		fmt.Fprintf(b, "%sas of parameter: $%d type=%d elsewhere=%v\n", indent, a.Param, a.ParamType, a.ParamElsewhere)
	}
	if a.Now != nil {
		fmt.Fprintf(b, "%sas of now: %s\n", indent, a.Now.Render("«now»"))
	}
}
