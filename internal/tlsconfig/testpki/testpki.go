// Package testpki issues throwaway certificates for tests: a CA, and
// leaf certificates carrying a role in their OrganizationalUnit, written
// as PEM files.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

// CA is a certificate authority whose certificate is in a PEM file.
type CA struct {
	File string // the CA certificate, PEM
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// NewCA creates a CA named name, with its files in a temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Files are a leaf certificate's PEM files and its serial number.
type Files struct {
	tlsconfig.Files
	Serial *big.Int
}

// Issue signs a certificate for role (its OU) and name (its CN), valid
// for client and server use on loopback, and writes it and its key to new
// files beside the CA's.
func (ca *CA) Issue(t testing.TB, role, name string) Files {
	t.Helper()
	f := Files{Files: tlsconfig.Files{
		Cert: filepath.Join(ca.dir, name+"-"+role+".pem"),
		Key:  filepath.Join(ca.dir, name+"-"+role+"-key.pem"),
		CA:   ca.File,
	}}
	f.Serial = ca.IssueTo(t, role, name, f.Cert, f.Key)
	return f
}

// IssueTo signs a certificate like Issue, writing it over cert and key,
// and returns its serial number.
func (ca *CA) IssueTo(t testing.TB, role, name, certFile, keyFile string) *big.Int {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{role}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", kb)
	writePEM(t, certFile, "CERTIFICATE", der)
	return tmpl.SerialNumber
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writePEM writes the file through a rename, as a rotation would, and
// moves its modification time on so that a reload sees the change even
// on a file system with coarse timestamps.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err == nil {
		later := st.ModTime().Add(time.Second)
		os.Chtimes(tmp, later, later)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// CopyFile copies src over dst the way writePEM writes.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", src)
	}
	writePEM(t, dst, blk.Type, blk.Bytes)
}
