// Package tlsconfig builds the mutual-TLS configurations of mcpcancel's
// gRPC servers and clients from PEM files (certificate, key, CA) that are
// read again whenever they change, so certificates rotate without a
// restart.
//
// Identity is the CA and the role, not the host name: a peer is trusted
// when its certificate chains to the CA, and its role is the certificate's
// Subject OrganizationalUnit ("gateway", "worker", "coordinator", "admin"
// or "operator"). A client checks that the server it reached has the role it
// meant to reach; servers authorise calls by role (package authz). The CA
// must therefore be one that signs certificates for mcpcancel alone.
// Host names are not checked because workers are reached at addresses
// (pod IPs) no certificate can list in advance.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Roles, as certificates carry them in Subject OrganizationalUnit.
const (
	RoleGateway     = "gateway"
	RoleWorker      = "worker"
	RoleCoordinator = "coordinator"
	RoleAdmin       = "admin"
	// RoleOperator may do what admin does, and cancel running calls.
	RoleOperator = "operator"
)

// ErrPartial means some but not all of the three files were given.
var ErrPartial = errors.New("tlsconfig: give all of --tls-cert, --tls-key and --tls-ca, or none")

// Files names the PEM files of one process.
type Files struct {
	Cert, Key, CA string
}

// Enabled says whether TLS is configured: all three files are named. It
// returns ErrPartial when only some are.
func (f Files) Enabled() (bool, error) {
	n := 0
	for _, p := range []string{f.Cert, f.Key, f.CA} {
		if p != "" {
			n++
		}
	}
	switch n {
	case 0:
		return false, nil
	case 3:
		return true, nil
	}
	return false, ErrPartial
}

// RoleOf returns the role a certificate carries: the first of its
// Subject OrganizationalUnits that is a known role, or "".
func RoleOf(cert *x509.Certificate) string {
	for _, ou := range cert.Subject.OrganizationalUnit {
		switch ou {
		case RoleGateway, RoleWorker, RoleCoordinator, RoleAdmin, RoleOperator:
			return ou
		}
	}
	return ""
}

// Source holds the current certificate and CA pool, reread from the
// files when their modification time or size changes. A file that
// cannot be read or parsed any more keeps what was loaded last.
type Source struct {
	files Files
	log   *slog.Logger

	mu    sync.Mutex
	stamp [3]fileStamp
	cert  *tls.Certificate
	pool  *x509.CertPool
	err   string // of the last reload that failed, logged once
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// Load reads the files; all three must be named. A reload that fails
// later is logged to log (nil: discarded), once per distinct error.
func Load(f Files, log *slog.Logger) (*Source, error) {
	if on, _ := f.Enabled(); !on {
		return nil, ErrPartial
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: f, log: log}
	if err := s.reloadLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

// current returns the certificate and pool, rereading changed files.
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch err := s.reloadLocked(); {
	case err == nil:
		s.err = ""
	case err.Error() != s.err:
		s.err = err.Error()
		s.log.Warn("TLS files changed but cannot be loaded; keeping the previous certificate", "err", err)
	}
	return s.cert, s.pool
}

func (s *Source) reloadLocked() error {
	var now [3]fileStamp
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("tlsconfig: %w", err)
		}
		now[i] = fileStamp{st.ModTime(), st.Size()}
	}
	if s.cert != nil && now == s.stamp {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("tlsconfig: certificate %s, key %s: %w", s.files.Cert, s.files.Key, err)
	}
	ca, err := os.ReadFile(s.files.CA)
	if err != nil {
		return fmt.Errorf("tlsconfig: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("tlsconfig: no PEM certificate in CA file %s", s.files.CA)
	}
	s.cert, s.pool, s.stamp = &cert, pool, now
	return nil
}

// ServerConfig requires every client to present a certificate that
// chains to the CA; the server presents its own. Both are the current
// ones at each handshake.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				NextProtos:   []string{"h2"},
			}, nil
		},
	}
}

// ClientConfig presents the current certificate and accepts a server
// whose certificate chains to the current CA and carries serverRole.
func (s *Source) ClientConfig(serverRole string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := s.current()
			return cert, nil
		},
		// The chain is verified below, against the CA as it is now, and
		// without a host name (see the package doc).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool := s.current()
			return verifyPeer(cs.PeerCertificates, pool, x509.ExtKeyUsageServerAuth, serverRole)
		},
	}
}

func verifyPeer(certs []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage, role string) error {
	if len(certs) == 0 {
		return errors.New("tlsconfig: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fmt.Errorf("tlsconfig: peer certificate: %w", err)
	}
	if got := RoleOf(certs[0]); got != role {
		return fmt.Errorf("tlsconfig: the peer's certificate has role %q (OU), want %q", got, role)
	}
	return nil
}

// ServerOption serves gRPC with ServerConfig.
func (s *Source) ServerOption() grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(s.ServerConfig()))
}

// DialOption dials a gRPC server of serverRole with ClientConfig.
func (s *Source) DialOption(serverRole string) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(s.ClientConfig(serverRole)))
}
