package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig/testpki"
)

// secureEtcd starts an etcd member that serves clients over TLS only,
// requires client certificates of ca, and has authentication enabled
// with the user root (password returned).
func secureEtcd(t *testing.T, ca *testpki.CA) (endpoint, password string) {
	t.Helper()
	server := ca.Issue(t, "etcd", "etcd-server")
	var e *embed.Etcd
	var cu *url.URL
	// The ports are free when picked, but another process may bind one
	// before etcd does: pick again then, as embedetcd.Start does.
	for try := 1; e == nil; try++ {
		addrs, err := embedetcd.FreeAddrs(2)
		if err != nil {
			t.Fatal(err)
		}
		cfg := embed.NewConfig()
		cfg.Dir = t.TempDir()
		cu, _ = url.Parse("https://" + addrs[0])
		pu, _ := url.Parse("http://" + addrs[1])
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = cfg.Name + "=" + pu.String()
		cfg.TickMs, cfg.ElectionMs = 10, 50
		cfg.UnsafeNoFsync = true
		cfg.BcryptCost = 4 // the least: a slow password check outlives etcd's Close under -race
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: server.Cert, KeyFile: server.Key, TrustedCAFile: server.CA, ClientCertAuth: true}
		e, err = embed.StartEtcd(cfg)
		if err != nil && (try == 5 || !embedetcd.AddrInUse(err)) {
			t.Fatal(err)
		}
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready")
	}
	// Enable authentication with a root user, over TLS with a client
	// certificate whose CN is no user.
	admin := ca.Issue(t, "etcd", "setup")
	tc, err := (transport.TLSInfo{CertFile: admin.Cert, KeyFile: admin.Key, TrustedCAFile: admin.CA}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	password = "pw-" + t.Name()
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// From now on a client without the password is refused.
	if _, err := cli.Put(ctx, "probe", "x"); err == nil {
		t.Fatal("etcd accepted a write without credentials")
	}
	return cu.String(), password
}

// The whole system as separate processes, secured: the coordinator
// reaches etcd over TLS with a username and password, and every gRPC hop
// is mutual TLS with per-role certificates. A call runs through the
// gateway with a JWT; the operator CLI reads the audit with an admin
// certificate; a worker's certificate cannot cancel.
func TestSecuredProcesses(t *testing.T) {
	etcdCA, ca := testpki.NewCA(t, "etcd"), testpki.NewCA(t, "mcpcancel")
	endpoint, password := secureEtcd(t, etcdCA)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "etcd-password")
	os.WriteFile(pwFile, []byte(password+"\n"), 0o600)
	etcdClient := etcdCA.Issue(t, "etcd", "coordinator-client")
	tlsArgs := func(f testpki.Files) []string {
		return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
	}

	coord := start(t, nil, append([]string{"coordinator", "--listen", "127.0.0.1:0", "--etcd", endpoint,
		"--etcd-cert", etcdClient.Cert, "--etcd-key", etcdClient.Key, "--etcd-ca", etcdClient.CA,
		"--etcd-username", "root", "--etcd-password-file", pwFile},
		tlsArgs(ca.Issue(t, tlsconfig.RoleCoordinator, "coord"))...)...)
	coordAddr := coord.waitLine(t, "coordinator: ")
	wk := start(t, nil, append([]string{"worker", "--coordinator", coordAddr, "--demo", "--name", "w1"},
		tlsArgs(ca.Issue(t, tlsconfig.RoleWorker, "w1"))...)...)
	wk.waitLine(t, "worker: ")

	hs := hsKey()
	jwks := filepath.Join(dir, "jwks.json")
	os.WriteFile(jwks, []byte(`{"keys":[{"kty":"oct","kid":"k1","k":"`+b64url(hs)+`"}]}`), 0o600)
	gw := start(t, nil, append([]string{"gateway", "--http", "127.0.0.1:0", "--coordinator", coordAddr,
		"--jwks-file", jwks, "--jwt-issuer", "https://issuer.test", "--jwt-audience", "mcpcancel"},
		tlsArgs(ca.Issue(t, tlsconfig.RoleGateway, "gw"))...)...)
	mcpURL := strings.TrimSpace(gw.waitLine(t, "mcp: "))

	adminFiles := ca.Issue(t, tlsconfig.RoleAdmin, "ops")
	admin := secureClient(t, coordAddr, adminFiles)
	waitForTools(t, admin, "echo", "sleep", "spin")

	token := hs256(hs, `{"iss":"https://issuer.test","aud":"mcpcancel","sub":"alice","exp":`+jsonNum(time.Now().Add(time.Hour).Unix())+`}`)
	if code, _ := mcpPost(t, mcpURL, "", "", initJSON); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	_, sid := mcpPost(t, mcpURL, token, "", initJSON)
	poll(t, "the gateway to list echo", func() bool {
		_, body := mcpPost(t, mcpURL, token, sid, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
		return strings.Contains(body, `"echo"`)
	})
	if _, body := mcpPost(t, mcpURL, token, sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"secured"}}}`); !strings.Contains(body, "secured") {
		t.Fatalf("call: %s", body)
	}
	var principal string
	poll(t, "the audit record", func() bool {
		r, err := admin.ListAudit(t.Context(), &pb.ListAuditRequest{})
		if err != nil || len(r.GetRecords()) == 0 {
			return false
		}
		principal = r.GetRecords()[0].GetPrincipal()
		return true
	})
	if principal != "jwt:https://issuer.test:alice" {
		t.Fatalf("audited principal %q", principal)
	}
	out, err := command(append([]string{"audit", "list", "--coordinator", coordAddr, "--json"}, tlsArgs(adminFiles)...)...).Output()
	if err != nil || !strings.Contains(string(out), `jwt:https://issuer.test:alice`) {
		t.Fatalf("mcpcancel audit list with an admin certificate: %v\n%s", err, out)
	}
	if err := command("audit", "list", "--coordinator", coordAddr).Run(); err == nil {
		t.Fatal("mcpcancel audit list without a certificate succeeded")
	}
	asWorker := secureClient(t, coordAddr, ca.Issue(t, tlsconfig.RoleWorker, "w2"))
	_, err = asWorker.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: "session:" + sid, RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a worker certificate calling Cancel: %v", err)
	}
}

func secureClient(t *testing.T, addr string, f testpki.Files) pb.CoordinatorServiceClient {
	t.Helper()
	src, err := tlsconfig.Load(f.Files, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, src.DialOption(tlsconfig.RoleCoordinator))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewCoordinatorServiceClient(conn)
}

const initJSON = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// mcpPost POSTs one message and returns the status and the session id,
// or the body when there is no session id.
func mcpPost(t *testing.T, url, token, session, body string) (int, string) {
	t.Helper()
	resp, b := testcluster.PostMCP(t, url, token, session, body)
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" && session == "" {
		return resp.StatusCode, id
	}
	return resp.StatusCode, string(b)
}

func jsonNum(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func hsKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// hs256 signs claims (JSON) with key.
func hs256(key []byte, claims string) string {
	signed := b64url([]byte(`{"alg":"HS256","typ":"JWT","kid":"k1"}`)) + "." + b64url([]byte(claims))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return signed + "." + b64url(m.Sum(nil))
}

// A gateway without authentication warns loudly when it listens beyond
// loopback, and not on loopback or with a tokens file.
func TestNoAuthenticationWarning(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("tok ops\n"), 0o600)
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--http", "0.0.0.0:0"}, true},
		{[]string{"--http", "127.0.0.1:0"}, false},
		{[]string{"--http", "0.0.0.0:0", "--tokens-file", tokens}, false},
	} {
		gw := start(t, nil, append([]string{"gateway", "--coordinator", "127.0.0.1:1"}, tc.args...)...)
		gw.waitLine(t, "mcp: ")
		if got := strings.Contains(gw.stderr(), "NO AUTHENTICATION"); got != tc.warn {
			t.Errorf("%v: warned %v, want %v:\n%s", tc.args, got, tc.warn, gw.stderr())
		}
	}
}
