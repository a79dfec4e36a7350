package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdSecurity is how the coordinator authenticates to etcd.
type etcdSecurity struct {
	cert, key, ca          string
	username, passwordFile string
}

func (e *etcdSecurity) register(f *cmdline.Flags) {
	f.StringVar(&e.cert, "etcd-cert", "", "PEM client certificate `file` for etcd (with --etcd-key)")
	f.StringVar(&e.key, "etcd-key", "", "PEM private key `file` of --etcd-cert")
	f.StringVar(&e.ca, "etcd-ca", "", "PEM `file` of the CA that signs etcd's server certificates; setting it (or --etcd-cert) dials etcd with TLS")
	f.StringVar(&e.username, "etcd-username", "", "etcd user `name` (etcd authentication), with --etcd-password-file")
	f.StringVar(&e.passwordFile, "etcd-password-file", "", "`file` holding the etcd user's password (one line)")
}

// apply sets cfg's TLS and credentials.
func (e *etcdSecurity) apply(cfg *clientv3.Config) error {
	if (e.cert == "") != (e.key == "") {
		return cmdline.Usage(errors.New("give --etcd-cert and --etcd-key together"))
	}
	if (e.username == "") != (e.passwordFile == "") {
		return cmdline.Usage(errors.New("give --etcd-username and --etcd-password-file together"))
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
			return cmdline.Usage(fmt.Errorf("--etcd %s: with --etcd-ca or --etcd-cert, name etcd by https:// URLs (http:// would dial in plaintext)", ep))
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
