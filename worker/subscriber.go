package worker

// Subscriber is who holds a resources/subscribe or unsubscribe: the
// client session, or, for a 2026-07-28 subscriptions/listen (which
// belongs to no session), the listen's own scope, so that the listens
// subscribed to one resource over one upstream connection are counted
// apart. It is an opaque key, never a credential; empty outside a call.
func (c *Call) Subscriber() string {
	if c.session != "" || c.exec == nil {
		return c.session
	}
	return c.exec.children.scope
}
