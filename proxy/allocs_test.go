package proxy

import "testing"

// fewestAllocsPerRun is testing.AllocsPerRun's count for f, the fewest
// over rounds rounds of runs calls each. AllocsPerRun counts the whole
// process's allocations: a live proxy's lease ticks and compaction rounds
// allocate on their own goroutines, about 40 each once a second (pprof),
// so a round that lasts long enough to meet one counts them too. On a
// loaded machine (four CPU hogs, load 13) 100 read-only transactions
// counted 73 per transaction against 63, and rounds of 10 met one each
// (66). Rounds of a few calls leave most rounds without one; their fewest
// is f's own count.
func fewestAllocsPerRun(rounds, runs int, f func()) float64 {
	fewest := testing.AllocsPerRun(runs, f)
	for range rounds - 1 {
		fewest = min(fewest, testing.AllocsPerRun(runs, f))
	}
	return fewest
}
