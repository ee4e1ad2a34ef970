package main

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/lease"
)

// leaseConfig is the proxy's lease configuration from the settings.
func (c *config) leaseConfig() lease.Config {
	compaction := c.compaction
	if compaction == 0 {
		compaction = -1 // lease.Config: never
	}
	return lease.Config{
		Generation:       uint64(c.generation),
		Interval:         c.heartbeat,
		Grace:            c.leaseGrace,
		CompactInterval:  compaction,
		DefaultRetention: c.retainHistory,
	}
}

// registerAtStart registers the proxy in the backend URL's database as soon
// as it can (retrying while the backend is unreachable), so that /readyz
// can say when this proxy's generation is in charge: a new generation's
// registration is what fences the old one. Other databases are registered
// in at their first session.
func registerAtStart(ctx context.Context, px *proxy.Proxy, database string, log *logrus.Entry) {
	for {
		l, err := px.Lease(ctx, database)
		if err == nil {
			log.WithFields(logrus.Fields{"database": database, "incarnation": l.ID(), "generation": l.Generation()}).Info("mzproxy registered")
			return
		}
		if errors.Is(err, lease.ErrLost) {
			// Fenced by a newer generation: it stays so.
			log.WithError(err).Error("mzproxy cannot register: fenced")
			return
		}
		log.WithError(err).Warn("mzproxy could not register yet; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
