package config

import (
	"crypto/x509"
	"net"
	"os"
	"strconv"
	"strings"

	"queen/pg"
)

// postgresVars names the variables of one program's PostgreSQL and their defaults: the broker
// reads PG_*, the front door PXDB_*, both in this one way.
type postgresVars struct {
	prefix                 string // of HOST, PORT, USER, PASSWORD, DB, USE_SSL, SSL_REJECT_UNAUTHORIZED, SSL_ROOT_CERT
	password, db           string
	poolVar                string
	pool, minPool, maxPool int
	dataDirVar, dataDir    string
}

// postgres reads the settings of one PostgreSQL.
func (r *reader) postgres(v postgresVars) pg.Settings {
	p := v.prefix
	s := pg.Settings{
		Servers:            r.pgServers(p+"HOST", p+"PORT"),
		User:               r.str("postgres", p+"USER"),
		Password:           r.str(v.password, p+"PASSWORD"),
		DB:                 r.str(v.db, p+"DB"),
		UseSSL:             r.boolean(false, p+"USE_SSL"),
		RejectUnauthorized: r.boolean(true, p+"SSL_REJECT_UNAUTHORIZED"),
		RootCert:           r.rootCert(p + "SSL_ROOT_CERT"),
		PoolSize:           r.intIn(v.pool, v.minPool, v.maxPool, v.poolVar),
		DataDir:            r.str(v.dataDir, v.dataDirVar),
		Prefix:             p,
	}
	return s
}

// rootCert reads a CA to verify PostgreSQL's certificate against: a PEM file path, or the PEM
// itself (as the reference takes it; \n escapes allow a one-line env file). nil when unset.
func (r *reader) rootCert(name string) []byte {
	v := r.str("", name)
	if v == "" {
		return nil
	}
	shown := v
	var pem []byte
	if strings.Contains(v, "-----BEGIN") {
		shown = "<PEM content>"
		pem = []byte(strings.ReplaceAll(v, `\n`, "\n"))
	} else {
		b, err := os.ReadFile(v)
		if err != nil {
			r.fail(name, shown, "cannot read the CA file: "+err.Error())
			return nil
		}
		pem = b
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		r.fail(name, shown, "holds no PEM-encoded CA certificate")
		return nil
	}
	return pem
}

// pgServers reads a host list (PG_HOST): a comma-separated list of host name, IP address or
// unix socket directory, each optionally with :port ([IPv6]:port); an entry without a port gets
// portVar's. An empty entry is a mistake too: the list says which servers may hold the data.
func (r *reader) pgServers(hostVar, portVar string) []pg.Server {
	port := r.intIn(5432, 1, 65535, portVar)
	v := r.str("", hostVar)
	if v == "" {
		return nil
	}
	var out []pg.Server
	for _, e := range strings.Split(v, ",") {
		s, ok := parsePGServer(strings.TrimSpace(e), port)
		if !ok {
			r.fail(hostVar, v, "must be a comma-separated list of host, host:port, [IPv6 address]:port or /unix/socket/directory")
			return nil
		}
		out = append(out, s)
	}
	return out
}

func parsePGServer(e string, port int) (pg.Server, bool) {
	host, p, err := net.SplitHostPort(e)
	if err != nil { // no port: the whole entry is the host
		host, p = e, strconv.Itoa(port)
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return pg.Server{}, false
	}
	s := pg.Server{Host: host, Port: n}
	if strings.HasPrefix(host, "/") || net.ParseIP(host) != nil {
		return s, true
	}
	ok := host != ""
	for _, c := range host {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_')
	}
	return s, ok
}
