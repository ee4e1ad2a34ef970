package integration

import (
	"context"
	"testing"
)

// stage is where the hostile and fault tests start: a context, a role, a
// database, proxies on one backend, and in the database the point table g
// (pointTable) readable by the role.
type stage struct {
	ctx     context.Context
	role    string
	db      string
	proxies []*proxyProc
}

// stageOpts says how a stage differs from the usual one: an ordinary role,
// a fresh database of the shared test PostgreSQL, one proxy, no g.
type stageOpts struct {
	ctx      context.Context // the test's context, when the backend needed one first
	postgres bool            // the role is postgres itself, not an ordinary one
	backend  string          // the proxies' --backend ("": the shared test PostgreSQL)
	db       string          // the database ("": a fresh one)
	rows     int             // g's rows (0: no g)
	create   bool            // the role may create objects in schema public
	proxies  [][]string      // each proxy's flags (nil: one proxy, no flags)
}

func newStage(t *testing.T, o stageOpts) *stage {
	t.Helper()
	s := &stage{ctx: o.ctx, role: "postgres", db: o.db}
	if s.ctx == nil {
		s.ctx = testContext(t)
	}
	if !o.postgres {
		s.role = ordinaryRole(t, s.ctx)
	}
	if s.db == "" {
		s.db = freshDatabase(t, s.ctx)
	}
	if o.proxies == nil {
		o.proxies = [][]string{nil}
	}
	for _, args := range o.proxies {
		if o.backend != "" {
			args = append([]string{"--backend", o.backend}, args...)
		}
		s.proxies = append(s.proxies, startProxy(t, args...))
	}
	if o.rows > 0 {
		pointTable(t, s.ctx, s.url(0, "postgres"), s.role, o.rows)
	}
	if o.create {
		mustExec(t, s.ctx, connectTo(t, s.ctx, s.url(0, "postgres")), "GRANT CREATE ON SCHEMA public TO "+s.role)
	}
	return s
}

// url is the URL of the stage's database through proxy i, as user.
func (s *stage) url(i int, user string) string { return s.proxies[i].URL(user, s.db) }
