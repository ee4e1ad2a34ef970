package planner

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TimestampExplanation is what EXPLAIN TIMESTAMP reports. The proxy fills
// it in; this file only formats it, in Materialize's text and JSON
// layouts (mz_adapter's TimestampExplanation: its Display impl and its
// serde form).
type TimestampExplanation struct {
	QueryTimestamp             uint64
	OracleReadTimestamp        *uint64 // nil when the oracle was not consulted (e.g. AS OF)
	LargestNotInAdvanceOfUpper uint64
	Upper                      []uint64 // a frontier: empty means closed
	Since                      []uint64
	RespondImmediately         bool
	// Timeline is "EpochMilliseconds" for mzproxy; "" prints as None and
	// timestamps without dates.
	Timeline        string
	SessionWallTime time.Time
	Sources         []TimestampSource
}

// TimestampSource is one input of the query.
type TimestampSource struct {
	Name          string // e.g. SourceName("materialize", "public", "t", 2)
	ReadFrontier  []uint64
	WriteFrontier []uint64
}

// EpochMilliseconds is the timeline mzproxy's timestamps live in.
const EpochMilliseconds = "EpochMilliseconds"

// SourceName names an input the way Materialize does:
// "materialize.public.t (u2, storage)".
func SourceName(database, schema, name string, id uint64) string {
	return fmt.Sprintf("%s.%s.%s (u%d, storage)", database, schema, name, id)
}

// Format renders the explanation in the requested format.
func (e *TimestampExplanation) Format(f ExplainFormat) string {
	if f == ExplainJSON {
		return e.JSON()
	}
	return e.Text()
}

// displayTS renders a timestamp as Materialize's DisplayableInTimeline:
// right-aligned in 13 columns, followed by the UTC date for the
// EpochMilliseconds timeline.
func (e *TimestampExplanation) displayTS(ts uint64) string {
	s := fmt.Sprintf("%13d", ts)
	if e.Timeline == EpochMilliseconds && ts <= maxDisplayMillis {
		s += " (" + time.UnixMilli(int64(ts)).UTC().Format("2006-01-02 15:04:05.000") + ")"
	}
	return s
}

// maxDisplayMillis is the last millisecond chrono (and so Materialize) can
// turn into a date, +262142-12-31T23:59:59.999Z.
const maxDisplayMillis = 8210298412799999

func (e *TimestampExplanation) displayFrontier(f []uint64) string {
	parts := make([]string, len(f))
	for i, t := range f {
		parts[i] = e.displayTS(t)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Text is the TEXT layout. Every line ends with a newline, like
// Materialize's writeln!s.
func (e *TimestampExplanation) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "                query timestamp: %s\n", e.displayTS(e.QueryTimestamp))
	if e.OracleReadTimestamp != nil {
		fmt.Fprintf(&b, "          oracle read timestamp: %s\n", e.displayTS(*e.OracleReadTimestamp))
	}
	fmt.Fprintf(&b, "largest not in advance of upper: %s\n", e.displayTS(e.LargestNotInAdvanceOfUpper))
	fmt.Fprintf(&b, "                          upper:%s\n", e.displayFrontier(e.Upper))
	fmt.Fprintf(&b, "                          since:%s\n", e.displayFrontier(e.Since))
	fmt.Fprintf(&b, "        can respond immediately: %v\n", e.RespondImmediately)
	timeline := "None"
	if e.Timeline != "" {
		timeline = "Some(" + e.Timeline + ")"
	}
	fmt.Fprintf(&b, "                       timeline: %s\n", timeline)
	w := e.SessionWallTime.UTC()
	fmt.Fprintf(&b, "              session wall time: %13d (%s)\n", w.UnixMilli(), w.Format("2006-01-02 15:04:05.000"))
	for _, s := range e.Sources {
		b.WriteString("\n")
		fmt.Fprintf(&b, "source %s:\n", s.Name)
		fmt.Fprintf(&b, "                  read frontier:%s\n", e.displayFrontier(s.ReadFrontier))
		fmt.Fprintf(&b, "                 write frontier:%s\n", e.displayFrontier(s.WriteFrontier))
	}
	return b.String()
}

// The JSON layout is serde's rendering of Materialize's
// TimestampExplanation<Timestamp>.
type (
	jsonExplanation struct {
		Determination      jsonDetermination `json:"determination"`
		Sources            []jsonSource      `json:"sources"`
		SessionWallTime    string            `json:"session_wall_time"`
		RespondImmediately bool              `json:"respond_immediately"`
	}
	jsonDetermination struct {
		TimestampContext           any           `json:"timestamp_context"`
		Since                      jsonAntichain `json:"since"`
		Upper                      jsonAntichain `json:"upper"`
		LargestNotInAdvanceOfUpper uint64        `json:"largest_not_in_advance_of_upper"`
		OracleReadTS               *uint64       `json:"oracle_read_ts"`
		SessionOracleReadTS        *uint64       `json:"session_oracle_read_ts"`
		RealTimeRecencyTS          *uint64       `json:"real_time_recency_ts"`
		Constraints                any           `json:"constraints"`
	}
	jsonAntichain struct {
		Elements []uint64 `json:"elements"`
	}
	jsonTimelineTimestamp struct {
		Timeline string  `json:"timeline"`
		ChosenTS uint64  `json:"chosen_ts"`
		OracleTS *uint64 `json:"oracle_ts"`
	}
	jsonSource struct {
		Name          string   `json:"name"`
		ReadFrontier  []uint64 `json:"read_frontier"`
		WriteFrontier []uint64 `json:"write_frontier"`
	}
)

func nonNil(f []uint64) []uint64 {
	if f == nil {
		return []uint64{}
	}
	return f
}

// JSON is the JSON layout, pretty-printed with two-space indentation.
func (e *TimestampExplanation) JSON() string {
	var ctx any = "NoTimestamp"
	if e.Timeline != "" {
		ctx = map[string]jsonTimelineTimestamp{"TimelineTimestamp": {
			Timeline: e.Timeline, ChosenTS: e.QueryTimestamp, OracleTS: e.OracleReadTimestamp,
		}}
	}
	j := jsonExplanation{
		Determination: jsonDetermination{
			TimestampContext:           ctx,
			Since:                      jsonAntichain{nonNil(e.Since)},
			Upper:                      jsonAntichain{nonNil(e.Upper)},
			LargestNotInAdvanceOfUpper: e.LargestNotInAdvanceOfUpper,
			OracleReadTS:               e.OracleReadTimestamp,
		},
		Sources:            []jsonSource{},
		SessionWallTime:    e.SessionWallTime.UTC().Format(time.RFC3339Nano),
		RespondImmediately: e.RespondImmediately,
	}
	for _, s := range e.Sources {
		j.Sources = append(j.Sources, jsonSource{Name: s.Name, ReadFrontier: nonNil(s.ReadFrontier), WriteFrontier: nonNil(s.WriteFrontier)})
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(j); err != nil {
		// Only plain values above: cannot happen.
		return `{"error": ` + strconv.Quote(err.Error()) + `}`
	}
	return strings.TrimSuffix(b.String(), "\n")
}
