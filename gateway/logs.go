package gateway

// sessionKey is the client session a call belongs to, as its worker
// sees it: the scope of a 2025-era HTTP session or stdio connection; none
// for a 2026-07-28 request, which is stateless.
func (c *call) sessionKey() string {
	if c.rev2026 {
		return ""
	}
	return c.s.scope
}

// wantedLevel is the least severe log level the client asked for: the
// request's own (2026-07-28) or its session's logging/setLevel; empty
// when it set none.
func (c *call) wantedLevel() string {
	if c.rev2026 {
		return c.logLevel
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.logLevel
}
