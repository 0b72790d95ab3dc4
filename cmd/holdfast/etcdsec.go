package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"os"
	"strings"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// etcdPasswordEnv is read for the etcd password when -etcd-password-file
// is not given: a password never comes from a flag.
const etcdPasswordEnv = "HOLDFAST_ETCD_PASSWORD"

// etcdSecurityFlags are the flags of how a command reaches an etcd
// cluster that requires TLS or authentication.
type etcdSecurityFlags struct {
	cacert, cert, key, user, passwordFile *string
}

func addEtcdSecurityFlags(fs *flag.FlagSet) *etcdSecurityFlags {
	return &etcdSecurityFlags{
		cacert:       fs.String("etcd-cacert", "", "reach etcd over TLS, trusting the CA certificates of `FILE` (PEM)"),
		cert:         fs.String("etcd-cert", "", "reach etcd over TLS with the client certificate of `FILE` (PEM; with -etcd-key)"),
		key:          fs.String("etcd-key", "", "the client certificate's private key `FILE` (PEM)"),
		user:         fs.String("etcd-user", "", "log in to etcd's authentication as `USER`; the password comes from -etcd-password-file or $"+etcdPasswordEnv),
		passwordFile: fs.String("etcd-password-file", "", "read the etcd password from `FILE` (default: $"+etcdPasswordEnv+")"),
	}
}

// set reports whether any of the flags was given.
func (f *etcdSecurityFlags) set() bool {
	return *f.cacert != "" || *f.cert != "" || *f.key != "" || *f.user != "" || *f.passwordFile != ""
}

// security reads the files the flags name. Every error is a usage error.
func (f *etcdSecurityFlags) security() (store.Security, error) {
	var sec store.Security
	if (*f.cert == "") != (*f.key == "") {
		return sec, usagef("-etcd-cert and -etcd-key go together")
	}
	if *f.cacert != "" || *f.cert != "" {
		sec.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if *f.cacert != "" {
			pem, err := os.ReadFile(*f.cacert)
			if err != nil {
				return sec, usagef("-etcd-cacert: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return sec, usagef("-etcd-cacert: %s holds no PEM certificate", *f.cacert)
			}
			sec.TLS.RootCAs = pool
		}
		if *f.cert != "" {
			pair, err := tls.LoadX509KeyPair(*f.cert, *f.key)
			if err != nil {
				return sec, usagef("-etcd-cert, -etcd-key: %v", err)
			}
			sec.TLS.Certificates = []tls.Certificate{pair}
		}
	}
	password := os.Getenv(etcdPasswordEnv)
	if *f.passwordFile != "" {
		data, err := os.ReadFile(*f.passwordFile)
		if err != nil {
			return sec, usagef("-etcd-password-file: %v", err)
		}
		password = strings.TrimRight(string(data), "\r\n")
	}
	switch {
	case *f.user == "" && *f.passwordFile != "":
		return sec, usagef("-etcd-password-file needs -etcd-user")
	case *f.user != "" && password == "":
		return sec, usagef("-etcd-user %s needs a password: -etcd-password-file FILE or $%s", *f.user, etcdPasswordEnv)
	}
	if *f.user != "" {
		sec.Username, sec.Password = *f.user, password
	}
	return sec, nil
}

// etcdOptions are the transport/etcd options of sec, for members (the
// http:// URLs of parseEtcdMembers).
func etcdOptions(sec store.Security, members []string) []etcd.Option {
	opts := []etcd.Option{etcd.WithEndpoints(sec.Endpoints(members)...)}
	if sec.TLS != nil {
		opts = append(opts, etcd.WithTLS(sec.TLS))
	}
	if sec.Username != "" {
		opts = append(opts, etcd.WithAuth(sec.Username, sec.Password))
	}
	return opts
}
