package auth

import (
	"errors"
	"net/http"
	"strings"
)

// ErrUnauthenticated means a request carried no valid credentials.
var ErrUnauthenticated = errors.New("auth: missing or invalid bearer token")

// Authenticator names the principal behind an HTTP request, or returns
// an error wrapping ErrUnauthenticated. A nil Authenticator makes every
// client "anonymous".
type Authenticator interface {
	Authenticate(r *http.Request) (principal string, err error)
}

// Identity is who a request's credentials name, and the OAuth scopes
// they grant. Handlers see it (Call.Principal, Call.Scopes); the token
// itself goes no further than the gateway.
type Identity struct {
	Principal string
	Scopes    []string
}

// IdentityAuthenticator is an Authenticator that also knows the scopes
// its credentials grant (a JWT's "scope" and "scp" claims).
type IdentityAuthenticator interface {
	Authenticator
	Identify(r *http.Request) (Identity, error)
}

// Anonymous is the principal of every client when there is no
// Authenticator.
const Anonymous = "anonymous"

// Identify authenticates r with a: a nil a names everyone Anonymous.
// A plain Authenticator's identity has no scopes.
func Identify(a Authenticator, r *http.Request) (Identity, error) {
	switch a := a.(type) {
	case nil:
		return Identity{Principal: Anonymous}, nil
	case IdentityAuthenticator:
		return a.Identify(r)
	default:
		p, err := a.Authenticate(r)
		return Identity{Principal: p}, err
	}
}

// AnyOf accepts a request that any of auths accepts, trying them in
// order (say a tokens file, then a JWKS).
func AnyOf(auths ...Authenticator) IdentityAuthenticator { return anyOf(auths) }

type anyOf []Authenticator

func (as anyOf) Authenticate(r *http.Request) (string, error) {
	id, err := as.Identify(r)
	return id.Principal, err
}

func (as anyOf) Identify(r *http.Request) (Identity, error) {
	err := ErrUnauthenticated
	for _, a := range as {
		id, e := Identify(a, r)
		if e == nil {
			return id, nil
		}
		if !errors.Is(e, ErrUnauthenticated) || errors.Is(err, ErrUnauthenticated) {
			err = e // an internal failure outranks a refusal
		}
	}
	return Identity{}, err
}

// bearer returns the request's bearer token.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}
