package occ

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/mzproxy/mzproxy/pgerr"
)

// TestReplay runs the scripts under testdata/replay: writers are state
// machines stepped one action at a time against a simStore, so a conflict,
// a refold or a cancel can be placed exactly. Regenerate with -rewrite.
//
// Commands:
//
//	init                         rows of the state at time 0, one per line
//	write name=W sel=S [max=N]   start writer W running statement S
//	step name=W [n=N] [ts=T]     perform W's pending action (N times);
//	                             ts= answers an allocate with T instead
//	                             of asking the simulated oracle
//	cancel name=W                W's context ends (an append already
//	                             called is in flight)
//	cancel-before-append name=W  W's context ends before it calls the
//	                             append: the driver reports it as an error
//	commit t=T name=N            an outside commit at T of the input rows
//	                             (+row or -row per line)
//	state                        the store; check: the serial model
func TestReplay(t *testing.T) {
	datadriven.Walk(t, "testdata/replay", func(t *testing.T, path string) {
		var (
			s       *simStore
			writers = map[string]*Machine[string]{}
			sels    = map[string]simSel{}
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string {
				for _, a := range d.CmdArgs {
					if a.Key == key && len(a.Vals) > 0 {
						return a.Vals[0]
					}
				}
				return ""
			}
			num := func(key string, def uint64) uint64 {
				v := arg(key)
				if v == "" {
					return def
				}
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					d.Fatalf(t, "%s: %v", key, err)
				}
				return n
			}
			name := arg("name")
			machine := func() *Machine[string] {
				m, ok := writers[name]
				if !ok {
					d.Fatalf(t, "no writer %q", name)
				}
				return m
			}
			switch d.Cmd {
			case "init":
				s = newSimStore(strings.Fields(d.Input)...)
				writers, sels = map[string]*Machine[string]{}, map[string]simSel{}
				return s.String()
			case "write":
				sel, ok := simSels[arg("sel")]
				if !ok {
					d.Fatalf(t, "unknown sel %q", arg("sel"))
				}
				m := NewMachine(Config{MaxAttempts: int(num("max", 0))}, sel.write())
				writers[name], sels[name] = m, sel
				return fmt.Sprintf("%s: %s\n", name, m.Action())
			case "step":
				m := machine()
				var b strings.Builder
				for i := num("n", 1); i > 0; i-- {
					a := m.Action()
					if a.Terminal() {
						break
					}
					var e Event[string]
					if ts := arg("ts"); ts != "" && a.Kind == ActAllocate {
						e = Event[string]{Kind: EvTimestamp, TS: num("ts", 0)}
					} else {
						e = exec(s, name, sels[name], a)
					}
					fmt.Fprintf(&b, "%s: %s -> %s\n", name, e, m.Step(e))
				}
				return b.String()
			case "cancel", "cancel-before-append":
				m := machine()
				e := Event[string]{Kind: EvCancel, Err: pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")}
				if d.Cmd == "cancel-before-append" {
					if m.Action().Kind != ActAppend {
						d.Fatalf(t, "%s is not about to append", name)
					}
					e.Kind = EvError
				}
				return fmt.Sprintf("%s: %s -> %s\n", name, e, m.Step(e))
			case "commit":
				var u []Update[string]
				for _, l := range strings.Fields(d.Input) {
					diff := 1
					if l[0] == '-' {
						diff = -1
					}
					u = append(u, Update[string]{Row: l[1:], Diff: int64(diff)})
				}
				r, err := s.append(name, num("t", 0), Payload[string]{Updates: Consolidate(u, id)})
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				if !r.OK {
					return fmt.Sprintf("conflict upper=%d\n", r.ActualUpper)
				}
				return "ok\n"
			case "state":
				out := s.String()
				if err := checkSerial(s, sels); err != nil {
					out += "serial model: " + err.Error() + "\n"
				} else {
					out += "serial model: ok\n"
				}
				return out
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}
