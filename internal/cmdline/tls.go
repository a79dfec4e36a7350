package cmdline

import (
	"log/slog"

	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

// TLS adds --tls-cert, --tls-key and --tls-ca to f, read into files.
func (f *Flags) TLS(files *tlsconfig.Files) {
	f.StringVar(&files.Cert, "tls-cert", "", "PEM certificate `file` for mutual TLS on gRPC, its role in the Subject OU (gateway, worker, coordinator or admin); reread when it changes; empty: plaintext")
	f.StringVar(&files.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	f.StringVar(&files.CA, "tls-ca", "", "PEM `file` of the CA that signs every mcpcancel certificate (and nothing else)")
}

// Security is a process's gRPC transport security: nil is plaintext.
type Security struct{ src *tlsconfig.Source }

// Source is where the certificates come from; nil is plaintext.
func (s Security) Source() *tlsconfig.Source { return s.src }

// LoadTLS loads files, if they are given.
func LoadTLS(files tlsconfig.Files, log *slog.Logger) (Security, error) {
	on, err := files.Enabled()
	if err != nil {
		return Security{}, usageError{err}
	}
	if !on {
		return Security{}, nil
	}
	src, err := tlsconfig.Load(files, log)
	return Security{src}, err
}

// ServerOptions serve with mutual TLS and authorise callers by p.
func (s Security) ServerOptions(p *authz.Policy) []grpc.ServerOption {
	if s.src == nil {
		return nil
	}
	return append([]grpc.ServerOption{s.src.ServerOption()}, p.ServerOptions()...)
}

// DialOptions dial a server of role with mutual TLS.
func (s Security) DialOptions(role string) []grpc.DialOption {
	if s.src == nil {
		return nil
	}
	return []grpc.DialOption{s.src.DialOption(role)}
}
