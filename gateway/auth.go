package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/mcpcancel/mcpcancel/gateway/auth"
)

type identityKey struct{}

func withIdentity(ctx context.Context, id auth.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityFrom returns the identity principalOf put in ctx; stdio
// connections have none.
func identityFrom(ctx context.Context) auth.Identity {
	id, _ := ctx.Value(identityKey{}).(auth.Identity)
	return id
}

// principalOf authenticates r, answering 401 when it fails. It returns
// the request carrying the caller's Identity, and false when the request
// must not go on.
func (h *httpTransport) principalOf(w http.ResponseWriter, r *http.Request) (string, *http.Request, bool) {
	id, err := auth.Identify(h.g.opts.Authenticator, r)
	if err == nil {
		return id.Principal, r.WithContext(withIdentity(r.Context(), id)), true
	}
	if !errors.Is(err, auth.ErrUnauthenticated) {
		h.g.log.Error("authenticating a request", "err", err)
	} else {
		h.g.log.Debug("unauthenticated request", "err", err, "remote", r.RemoteAddr)
	}
	h.guard.unauthorized(w, r)
	return "", r, false
}
