// Package auth authenticates the HTTP requests of MCP clients for the
// gateway, which is an OAuth 2.1 resource server: it names the principal
// behind a request and the scopes its credentials grant, and limits each
// principal's rate. Tokens come from a static file (TokenFile) or are
// JSON Web Tokens verified with a JWK set (JWKS) read from a file or
// fetched from the issuer and kept fresh; AnyOf tries several in order.
// The gateway applies an Authenticator and answers 401 and 403; nothing
// here knows MCP.
//
// A gateway that accepts an operator's static token and the tokens of
// an identity provider:
//
//	tokens, err := auth.NewTokenFile("/etc/mcpcancel/tokens")
//	if err != nil { ... }
//	jwks, err := auth.NewRemoteJWKS(ctx, auth.JWTOptions{
//		Issuer:   "https://login.example.com",
//		Audience: "https://mcp.example.com/mcp",
//	})
//	if err != nil { ... }
//	defer jwks.Close()
//	gw := gateway.New(gateway.Options{Authenticator: auth.AnyOf(tokens, jwks), ...})
package auth
