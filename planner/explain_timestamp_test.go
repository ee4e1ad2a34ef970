package planner

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"
)

func TestExplainTimestampText(t *testing.T) {
	oracle := uint64(1700000000000)
	e := &TimestampExplanation{
		QueryTimestamp:             1700000000000,
		OracleReadTimestamp:        &oracle,
		LargestNotInAdvanceOfUpper: 1700000000000,
		Upper:                      []uint64{1700000000001},
		Since:                      []uint64{1699999999000},
		RespondImmediately:         true,
		Timeline:                   EpochMilliseconds,
		SessionWallTime:            time.UnixMilli(1700000000123),
		Sources: []TimestampSource{{
			Name:          SourceName("materialize", "public", "t1", 2),
			ReadFrontier:  []uint64{1699999999000},
			WriteFrontier: []uint64{1700000000001},
		}},
	}
	want := `                query timestamp: 1700000000000 (2023-11-14 22:13:20.000)
          oracle read timestamp: 1700000000000 (2023-11-14 22:13:20.000)
largest not in advance of upper: 1700000000000 (2023-11-14 22:13:20.000)
                          upper:[1700000000001 (2023-11-14 22:13:20.001)]
                          since:[1699999999000 (2023-11-14 22:13:19.000)]
        can respond immediately: true
                       timeline: Some(EpochMilliseconds)
              session wall time: 1700000000123 (2023-11-14 22:13:20.123)

source materialize.public.t1 (u2, storage):
                  read frontier:[1699999999000 (2023-11-14 22:13:19.000)]
                 write frontier:[1700000000001 (2023-11-14 22:13:20.001)]
`
	got := e.Text()
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	// The proxy's tests find the timestamp with this regexp.
	m := regexp.MustCompile(`(?m)^\s+query timestamp:\s*(\d+)`).FindStringSubmatch(got)
	if m == nil || m[1] != "1700000000000" {
		t.Fatalf("regexp did not find the query timestamp: %v", m)
	}

	// Small timestamps are right-aligned in 13 columns; an empty frontier
	// is []; no oracle line without an oracle read.
	e2 := &TimestampExplanation{QueryTimestamp: 5, LargestNotInAdvanceOfUpper: 5, Upper: nil, Since: []uint64{0},
		SessionWallTime: time.UnixMilli(0)}
	want2 := `                query timestamp:             5
largest not in advance of upper:             5
                          upper:[]
                          since:[            0]
        can respond immediately: false
                       timeline: None
              session wall time:             0 (1970-01-01 00:00:00.000)
`
	if got := e2.Text(); got != want2 {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want2)
	}
}

func TestExplainTimestampJSON(t *testing.T) {
	oracle := uint64(1700000000000)
	e := &TimestampExplanation{
		QueryTimestamp: 1700000000000, OracleReadTimestamp: &oracle,
		LargestNotInAdvanceOfUpper: 1700000000000, Upper: []uint64{1700000000001}, Since: []uint64{1},
		RespondImmediately: true, Timeline: EpochMilliseconds, SessionWallTime: time.UnixMilli(1700000000123),
		Sources: []TimestampSource{{Name: "materialize.public.t1 (u2, storage)", ReadFrontier: []uint64{1}, WriteFrontier: []uint64{1700000000001}}},
	}
	var v struct {
		Determination struct {
			TimestampContext struct {
				TimelineTimestamp struct {
					Timeline string  `json:"timeline"`
					ChosenTS uint64  `json:"chosen_ts"`
					OracleTS *uint64 `json:"oracle_ts"`
				}
			} `json:"timestamp_context"`
			Since struct{ Elements []uint64 } `json:"since"`
			Upper struct{ Elements []uint64 } `json:"upper"`
		} `json:"determination"`
		Sources []struct {
			Name         string   `json:"name"`
			ReadFrontier []uint64 `json:"read_frontier"`
		} `json:"sources"`
		SessionWallTime    string `json:"session_wall_time"`
		RespondImmediately bool   `json:"respond_immediately"`
	}
	out := e.Format(ExplainJSON)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tt := v.Determination.TimestampContext.TimelineTimestamp
	if tt.Timeline != EpochMilliseconds || tt.ChosenTS != 1700000000000 || tt.OracleTS == nil || *tt.OracleTS != oracle {
		t.Fatalf("timestamp_context: %+v\n%s", tt, out)
	}
	if v.Determination.Upper.Elements[0] != 1700000000001 || v.Determination.Since.Elements[0] != 1 {
		t.Fatalf("frontiers: %s", out)
	}
	if len(v.Sources) != 1 || v.Sources[0].Name != "materialize.public.t1 (u2, storage)" || !v.RespondImmediately {
		t.Fatalf("sources: %s", out)
	}
	if v.SessionWallTime != "2023-11-14T22:13:20.123Z" {
		t.Fatalf("session_wall_time %q", v.SessionWallTime)
	}
}
