package main

import "github.com/mzproxy/mzproxy/proxy/lease"

// leaseConfig is the proxy's lease configuration from the settings.
func (c *config) leaseConfig() lease.Config {
	compaction := c.compaction
	if compaction == 0 {
		compaction = -1 // lease.Config: never
	}
	tick := c.tick
	if tick == 0 {
		tick = -1 // lease.Config: never
	}
	return lease.Config{
		Generation:       uint64(c.generation),
		Interval:         c.heartbeat,
		Grace:            c.leaseGrace,
		CompactInterval:  compaction,
		TickInterval:     tick,
		DefaultRetention: c.retainHistory,
	}
}
