package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

// tlsFlags adds --tls-cert, --tls-key and --tls-ca to f.
func tlsFlags(f *flags, files *tlsconfig.Files) {
	f.fs.StringVar(&files.Cert, "tls-cert", "", "PEM certificate `file` for mutual TLS on gRPC, its role in the Subject OU (gateway, worker, coordinator or admin); reread when it changes; empty: plaintext")
	f.fs.StringVar(&files.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	f.fs.StringVar(&files.CA, "tls-ca", "", "PEM `file` of the CA that signs every mcpcancel certificate (and nothing else)")
}

// grpcSecurity is a process's gRPC transport security: nil is plaintext.
type grpcSecurity struct{ src *tlsconfig.Source }

// loadTLS loads files, if they are given.
func loadTLS(files tlsconfig.Files, log *slog.Logger) (grpcSecurity, error) {
	on, err := files.Enabled()
	if err != nil {
		return grpcSecurity{}, usageError{err}
	}
	if !on {
		return grpcSecurity{}, nil
	}
	src, err := tlsconfig.Load(files, log)
	return grpcSecurity{src}, err
}

// serverOptions serve with mutual TLS and authorise callers by p.
func (s grpcSecurity) serverOptions(p *authz.Policy) []grpc.ServerOption {
	if s.src == nil {
		return nil
	}
	return append([]grpc.ServerOption{s.src.ServerOption()}, p.ServerOptions()...)
}

// dialOptions dial a server of role with mutual TLS.
func (s grpcSecurity) dialOptions(role string) []grpc.DialOption {
	if s.src == nil {
		return nil
	}
	return []grpc.DialOption{s.src.DialOption(role)}
}

// etcdSecurity is how the coordinator authenticates to etcd.
type etcdSecurity struct {
	cert, key, ca          string
	username, passwordFile string
}

func (e *etcdSecurity) register(f *flags) {
	f.fs.StringVar(&e.cert, "etcd-cert", "", "PEM client certificate `file` for etcd (with --etcd-key)")
	f.fs.StringVar(&e.key, "etcd-key", "", "PEM private key `file` of --etcd-cert")
	f.fs.StringVar(&e.ca, "etcd-ca", "", "PEM `file` of the CA that signs etcd's server certificates; setting it (or --etcd-cert) dials etcd with TLS")
	f.fs.StringVar(&e.username, "etcd-username", "", "etcd user `name` (etcd authentication), with --etcd-password-file")
	f.fs.StringVar(&e.passwordFile, "etcd-password-file", "", "`file` holding the etcd user's password (one line)")
}

// apply sets cfg's TLS and credentials.
func (e *etcdSecurity) apply(cfg *clientv3.Config) error {
	if (e.cert == "") != (e.key == "") {
		return usageError{errors.New("give --etcd-cert and --etcd-key together")}
	}
	if (e.username == "") != (e.passwordFile == "") {
		return usageError{errors.New("give --etcd-username and --etcd-password-file together")}
	}
	if e.username != "" {
		b, err := os.ReadFile(e.passwordFile)
		if err != nil {
			return fmt.Errorf("etcd password: %w", err)
		}
		cfg.Username, cfg.Password = e.username, strings.TrimRight(string(b), "\r\n")
	}
	if e.cert == "" && e.ca == "" {
		return nil
	}
	for _, ep := range cfg.Endpoints {
		if strings.HasPrefix(ep, "http://") {
			return usageError{fmt.Errorf("--etcd %s: with --etcd-ca or --etcd-cert, name etcd by https:// URLs (http:// would dial in plaintext)", ep)}
		}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.cert != "" {
		cert, err := tls.LoadX509KeyPair(e.cert, e.key)
		if err != nil {
			return fmt.Errorf("etcd client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if e.ca != "" {
		b, err := os.ReadFile(e.ca)
		if err != nil {
			return fmt.Errorf("etcd CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(b) {
			return fmt.Errorf("etcd CA: no PEM certificate in %s", e.ca)
		}
	}
	cfg.TLS = tc
	return nil
}

// dialCoordinator dials the coordinator as an operator: with files (an
// admin certificate) if they are given, in plaintext if not.
func dialCoordinator(target string, files tlsconfig.Files) (*grpc.ClientConn, error) {
	sec, err := loadTLS(files, nil)
	if err != nil {
		return nil, err
	}
	return dial.New(target, sec.dialOptions(tlsconfig.RoleCoordinator)...)
}
