package frontend

// Draining reports whether Shutdown or Close has begun: the server accepts
// no new sessions and is ending the ones it has. Health checks use it to
// report the process as not ready while it drains.
func (s *Server) Draining() bool { return s.isDraining() }
