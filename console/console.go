// Package console is mcpcancel's web console for operators: the calls in
// flight, updating live over server-sent events; the decision feed; audit
// search; the workers; a call's timeline; and an operator cancel on every
// running call. Pages are rendered on the server with html/template from
// embedded files, and a small embedded script applies the live updates:
// there is no front-end build step.
//
// It reads and cancels through a coordinator's CoordinatorService and
// AdminService, as any client with the admin or operator role would.
// Who may look and cancel is decided by Options.Access; by default only
// loopback clients, addressing the console by a loopback name, may.
package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Viewer is the person looking at the console.
type Viewer struct {
	// Name is recorded in the audit when the viewer cancels a call.
	Name string
	// CanCancel says whether the viewer may cancel running calls.
	CanCancel bool
}

// ErrForbidden is what an Access function returns for a request that may
// not see the console.
var ErrForbidden = errors.New("console: forbidden")

// Options configures a console. Coordinator and Admin are required.
type Options struct {
	Coordinator pb.CoordinatorServiceClient
	Admin       pb.AdminServiceClient
	// Access names the viewer of a request, or fails with ErrForbidden.
	// Nil means LoopbackAccess.
	Access func(*http.Request) (Viewer, error)
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// WriteTimeout bounds each write to a browser (default 10s).
	WriteTimeout time.Duration
}

// Console serves the web console. It holds no state of its own: every
// page and event stream reads the coordinator.
type Console struct {
	opts  Options
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New returns a console; it panics if a required option is missing.
func New(opts Options) *Console {
	if opts.Coordinator == nil || opts.Admin == nil {
		panic("console: Options.Coordinator and Options.Admin are required")
	}
	if opts.Access == nil {
		opts.Access = LoopbackAccess
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	c := &Console{opts: opts, pages: parsePages()}
	c.routes()
	return c
}

func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, p := range []string{"calls", "audit", "workers", "call"} {
		pages[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html"))
	}
	return pages
}

func (c *Console) routes() {
	c.mux = http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /{$}", c.viewing(c.callsPage))
	c.mux.HandleFunc("GET /audit", c.viewing(c.auditPage))
	c.mux.HandleFunc("GET /workers", c.viewing(c.workersPage))
	c.mux.HandleFunc("GET /calls/{id}", c.viewing(c.callPage))
	c.mux.HandleFunc("GET /events", c.viewing(c.events))
	c.mux.HandleFunc("POST /calls/{id}/cancel", c.viewing(c.cancel))
}

// Handler serves the console. POSTs from other origins are refused
// (http.CrossOriginProtection), so no other site can make a viewer's
// browser cancel a call.
func (c *Console) Handler() http.Handler {
	return http.NewCrossOriginProtection().Handler(c.mux)
}

type viewerKey struct{}

// viewing lets only viewers Access admits reach h.
func (c *Console) viewing(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := c.opts.Access(r)
		if err != nil {
			http.Error(w, "You may not see this console: "+err.Error(), http.StatusForbidden)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), viewerKey{}, v)))
	}
}

func viewerOf(r *http.Request) Viewer {
	v, _ := r.Context().Value(viewerKey{}).(Viewer)
	return v
}

// LoopbackAccess admits a client on a loopback address that names the
// console by a loopback host (so a DNS-rebinding page cannot read it), as
// the operator "local", who may cancel.
func LoopbackAccess(r *http.Request) (Viewer, error) {
	if !isLoopback(r.RemoteAddr) || !isLoopbackHost(r.Host) {
		return Viewer{}, errors.Join(ErrForbidden, errors.New("only loopback clients, at a loopback address, may use this console"))
	}
	return Viewer{Name: "local", CanCancel: true}, nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return host == "localhost" || isLoopback(host)
}

// CertAccess admits a client by the verified certificate it presented
// (serve the console with tls.RequireAndVerifyClientCert and the mcpcancel
// CA): role admin may look, role operator may also cancel. The viewer's
// name is the certificate's Subject CommonName.
func CertAccess(r *http.Request) (Viewer, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return Viewer{}, errors.Join(ErrForbidden, errors.New("a client certificate with role admin or operator is required"))
	}
	cert := r.TLS.VerifiedChains[0][0]
	switch tlsconfig.RoleOf(cert) {
	case tlsconfig.RoleOperator:
		return Viewer{Name: cert.Subject.CommonName, CanCancel: true}, nil
	case tlsconfig.RoleAdmin:
		return Viewer{Name: cert.Subject.CommonName}, nil
	}
	return Viewer{}, errors.Join(ErrForbidden, errors.New("the certificate's role is neither admin nor operator"))
}
