package proxy

import "github.com/mzproxy/mzproxy/planner"

// PlanCacheStats returns the hit and miss counts and size of the plan
// cache this proxy's sessions share (for metrics).
func (p *Proxy) PlanCacheStats() planner.CacheStats { return p.planner.Stats() }
