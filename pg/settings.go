package pg

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
)

// Server is one PostgreSQL server: a host name, an IP address or a unix socket directory (an
// absolute path), and a port.
type Server struct {
	Host string
	Port int
}

// String is host:port, as the logs show it.
func (s Server) String() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Settings say which PostgreSQL a program uses and how it connects. The broker reads them from
// PG_* variables, the front door from PXDB_* ones (config package), in one way.
type Settings struct {
	// Servers are tried in order, and a connection keeps the first that accepts writes: the
	// list can name a primary and its standbys. Empty: a private PostgreSQL under DataDir.
	Servers  []Server
	User     string
	Password string
	DB       string
	// TLS to Servers: UseSSL turns it on; the server's certificate and name are verified
	// against RootCert (PEM) when set, else the system roots; RejectUnauthorized=false without
	// RootCert encrypts without verifying.
	UseSSL             bool
	RejectUnauthorized bool
	RootCert           []byte
	PoolSize           int
	DataDir            string
	// Prefix names the variables behind the settings in log lines and errors: "PG_", "PXDB_".
	Prefix string
}

// Hosts is Servers as the logs show them, every entry with its port.
func (s Settings) Hosts() string {
	out := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		out[i] = srv.String()
	}
	return strings.Join(out, ",")
}

// ConnString is the libpq keyword/value form of Servers and the role. Every new connection
// tries the servers in order and keeps the first that accepts writes
// (target_session_attrs=read-write): a standby is skipped, and after a failover the pool reaches
// the promoted server by itself, since the connections to the old primary die with it. TLS is
// not part of it: NewPool takes it as a tls.Config (TLS), checked against each host's name.
func (s Settings) ConnString() string {
	hosts := make([]string, len(s.Servers))
	ports := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		hosts[i], ports[i] = srv.Host, strconv.Itoa(srv.Port)
	}
	return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable target_session_attrs=read-write",
		quote(strings.Join(hosts, ",")), quote(strings.Join(ports, ",")), quote(s.User), quote(s.Password), quote(s.DB))
}

// quote makes a value safe inside a libpq keyword/value connection string.
func quote(v string) string {
	out := []byte{'\''}
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, v[i])
	}
	return string(append(out, '\''))
}

// TLS builds the TLS configuration of the connections to Servers, and logs which of the modes
// is in force:
//
//   - plaintext: UseSSL=false (nil configuration);
//   - verify-full against the system roots, or against RootCert alone when it is set (the
//     certificate chain and the host name are both checked);
//   - accept-any: RejectUnauthorized=false without a CA, encrypted but unverified.
//
// There is no opportunistic mode: with UseSSL a server without TLS is an error (CheckTLS).
// The "config: postgres" line names the servers, the role and the TLS mode, with attrs (the
// pool's settings) between them.
func (s Settings) TLS(log *slog.Logger, attrs ...any) (*tls.Config, error) {
	p := s.Prefix
	password := "unset"
	if s.Password != "" {
		password = "set"
	}
	line := append([]any{"hosts", s.Hosts(), "database", s.DB, "user", s.User, "password", password}, attrs...)
	if !s.UseSSL {
		if len(s.RootCert) > 0 {
			log.Warn(p + "SSL_ROOT_CERT is set but " + p + "USE_SSL is not: the PostgreSQL connection is PLAINTEXT")
		}
		log.Info("config: postgres", append(line, "use_ssl", false, "ssl_trust", "plaintext")...)
		return nil, nil
	}
	// The name checked is each host's own: NewPool sets ServerName per host.
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	trust := "system-roots"
	if len(s.RootCert) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.RootCert) {
			return nil, fmt.Errorf("invalid %sSSL_ROOT_CERT: holds no PEM-encoded CA certificate", p)
		}
		t.RootCAs, trust = pool, "supplied-ca"
		if !s.RejectUnauthorized {
			log.Warn(p + "SSL_REJECT_UNAUTHORIZED=false is ignored because " + p + "SSL_ROOT_CERT is set: the server certificate is verified against that CA")
		}
	} else if !s.RejectUnauthorized {
		t.InsecureSkipVerify, trust = true, "accept-any"
		log.Warn("PostgreSQL TLS is encrypted but UNVERIFIED (" + p + "SSL_REJECT_UNAUTHORIZED=false): the server's certificate is not checked, so anyone on the path can impersonate the database; set " + p + "SSL_ROOT_CERT to the server's CA instead")
	}
	log.Info("config: postgres", append(line, "use_ssl", true, "ssl_reject_unauthorized", s.RejectUnauthorized,
		"ssl_trust", trust, "ssl_verified", !t.InsecureSkipVerify)...)
	return t, nil
}
