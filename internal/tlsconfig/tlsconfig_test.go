package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"errors"
	"math/big"
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig/testpki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server serves gRPC health with src on loopback and records the serial
// number of each caller's certificate.
type server struct {
	addr string
	mu   sync.Mutex
	seen []*big.Int
}

func serve(t *testing.T, src *tlsconfig.Source) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: lis.Addr().String()}
	gs := testcluster.GRPCServer(src.ServerOption(), grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p, _ := peer.FromContext(ctx)
		info := p.AuthInfo.(credentials.TLSInfo)
		s.mu.Lock()
		s.seen = append(s.seen, info.State.VerifiedChains[0][0].SerialNumber)
		s.mu.Unlock()
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return s
}

func (s *server) lastSeen() *big.Int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[len(s.seen)-1]
}

// check makes one health call over a new connection with creds.
func check(t *testing.T, addr string, creds grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	return err
}

func load(t *testing.T, f tlsconfig.Files) *tlsconfig.Source {
	t.Helper()
	src, err := tlsconfig.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// servedSerial does a TLS handshake with the server and returns the
// serial number of the certificate it presented.
func servedSerial(t *testing.T, addr string, client *tlsconfig.Source) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, client.ClientConfig(tlsconfig.RoleCoordinator))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// Mutual TLS with roles: a client with a certificate of the CA gets in;
// one with none, or of another CA, fails the handshake; a client refuses
// a server without the role it meant to reach.
func TestMutualTLS(t *testing.T) {
	ca := testpki.NewCA(t, "mcpcancel")
	srv := serve(t, load(t, ca.Issue(t, tlsconfig.RoleCoordinator, "coord").Files))
	client := load(t, ca.Issue(t, tlsconfig.RoleGateway, "gw").Files)
	if err := check(t, srv.addr, client.DialOption(tlsconfig.RoleCoordinator)); err != nil {
		t.Fatalf("a good client: %v", err)
	}
	if err := check(t, srv.addr, client.DialOption(tlsconfig.RoleWorker)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a server of the wrong role: %v", err)
	}
	noCert := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))
	if err := check(t, srv.addr, noCert); status.Code(err) != codes.Unavailable {
		t.Fatalf("no client certificate: %v", err)
	}
	other := load(t, testpki.NewCA(t, "other").Issue(t, tlsconfig.RoleAdmin, "mallory").Files)
	if err := check(t, srv.addr, other.DialOption(tlsconfig.RoleCoordinator)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a certificate of another CA: %v", err)
	}
	if _, err := tlsconfig.Load(tlsconfig.Files{Cert: "x"}, nil); !errors.Is(err, tlsconfig.ErrPartial) {
		t.Fatalf("partial files: %v", err)
	}
}

// Rotation without restart: the server's new certificate, a client's
// new certificate and a new CA are all used from the next handshake on;
// a half-written rotation keeps the previous certificate.
func TestRotation(t *testing.T) {
	ca := testpki.NewCA(t, "mcpcancel")
	sf, cf := ca.Issue(t, tlsconfig.RoleCoordinator, "coord"), ca.Issue(t, tlsconfig.RoleGateway, "gw")
	srv := serve(t, load(t, sf.Files))
	client := load(t, cf.Files)
	if got := servedSerial(t, srv.addr, client); got.Cmp(sf.Serial) != 0 {
		t.Fatalf("served serial %v, want %v", got, sf.Serial)
	}
	// The server's certificate.
	next := ca.IssueTo(t, tlsconfig.RoleCoordinator, "coord", sf.Cert, sf.Key)
	if got := servedSerial(t, srv.addr, client); got.Cmp(next) != 0 {
		t.Fatalf("after rotation the server presents %v, want %v", got, next)
	}
	// The client's certificate.
	if err := check(t, srv.addr, client.DialOption(tlsconfig.RoleCoordinator)); err != nil || srv.lastSeen().Cmp(cf.Serial) != 0 {
		t.Fatalf("client serial %v (%v), want %v", srv.lastSeen(), err, cf.Serial)
	}
	nextClient := ca.IssueTo(t, tlsconfig.RoleGateway, "gw", cf.Cert, cf.Key)
	if err := check(t, srv.addr, client.DialOption(tlsconfig.RoleCoordinator)); err != nil || srv.lastSeen().Cmp(nextClient) != 0 {
		t.Fatalf("after rotation the client presents %v (%v), want %v", srv.lastSeen(), err, nextClient)
	}
	// A half-written rotation (a certificate without its key) is not
	// loaded: the pair in use stays.
	half := testpki.NewCA(t, "tmp").Issue(t, tlsconfig.RoleCoordinator, "half")
	testpki.CopyFile(t, half.Cert, sf.Cert)
	if got := servedSerial(t, srv.addr, client); got.Cmp(next) != 0 {
		t.Fatalf("a mismatched key: server presents %v, want the previous %v", got, next)
	}
	ca.IssueTo(t, tlsconfig.RoleCoordinator, "coord", sf.Cert, sf.Key)
	// The CA: a client of a new CA is refused until the server's CA file
	// names that CA.
	ca2 := testpki.NewCA(t, "mcpcancel-2026")
	c2 := load(t, ca2.Issue(t, tlsconfig.RoleGateway, "gw2").Files)
	skipServer := func(src *tlsconfig.Source) grpc.DialOption {
		cfg := src.ClientConfig(tlsconfig.RoleCoordinator)
		cfg.VerifyConnection = nil // this client trusts ca2 only; the server is ca's
		return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	}
	if err := check(t, srv.addr, skipServer(c2)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client of a CA the server does not trust yet: %v", err)
	}
	testpki.CopyFile(t, ca2.File, sf.CA)
	if err := check(t, srv.addr, skipServer(c2)); err != nil {
		t.Fatalf("after the server's CA rotated: %v", err)
	}
}
