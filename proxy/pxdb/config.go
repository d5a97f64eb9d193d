package pxdb

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Config says where the control-plane database is.
type Config struct {
	Host     string // PXDB_HOST; "" runs a private PostgreSQL in DataDir
	Port     int
	User     string
	Password string
	DB       string
	// TLS to Host: UseSSL turns it on; the server's certificate and name are verified against
	// the system roots, or against RootCert (a CA file) when set; RejectUnauthorized=false
	// without RootCert encrypts without verifying.
	UseSSL             bool
	RejectUnauthorized bool
	RootCert           string
	PoolSize           int
	DataDir            string // QUEEN_PROXY_DATA_DIR
}

// ConfigFromEnv reads the PXDB_* variables and QUEEN_PROXY_DATA_DIR through getenv. A malformed
// value is an error naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	r := envReader{getenv: getenv}
	c := Config{
		Host:               r.str("PXDB_HOST", ""),
		Port:               r.intIn("PXDB_PORT", 5432, 1, 65535),
		User:               r.str("PXDB_USER", "postgres"),
		Password:           r.str("PXDB_PASSWORD", ""),
		DB:                 r.str("PXDB_DB", "queen_proxy"),
		UseSSL:             r.boolean("PXDB_USE_SSL", false),
		RejectUnauthorized: r.boolean("PXDB_SSL_REJECT_UNAUTHORIZED", true),
		RootCert:           r.str("PXDB_SSL_ROOT_CERT", ""),
		PoolSize:           r.intIn("PXDB_POOL_SIZE", 16, 1, 1000),
		DataDir:            r.str("QUEEN_PROXY_DATA_DIR", "./data/queen-proxy"),
	}
	if c.RootCert != "" && r.err == nil {
		// Read here so that a wrong path stops the start naming the variable, not at the first
		// connection.
		b, err := os.ReadFile(c.RootCert)
		switch {
		case err != nil:
			r.fail("PXDB_SSL_ROOT_CERT", c.RootCert, "cannot read the CA file: "+err.Error())
		case !x509.NewCertPool().AppendCertsFromPEM(b):
			r.fail("PXDB_SSL_ROOT_CERT", c.RootCert, "holds no PEM-encoded CA certificate")
		}
	}
	return c, r.err
}

// sslMode is the libpq sslmode that the TLS settings amount to.
func (c Config) sslMode() string {
	switch {
	case !c.UseSSL:
		return "disable"
	case c.RootCert == "" && !c.RejectUnauthorized:
		return "require" // encrypted, certificate not checked
	default:
		return "verify-full"
	}
}

// connString is the URL form of the settings, for pgxpool: every value travels as a query
// parameter, percent-encoded, so none needs quoting rules of its own.
func (c Config) connString() string {
	q := url.Values{
		"host":            {c.Host},
		"port":            {strconv.Itoa(c.Port)},
		"user":            {c.User},
		"password":        {c.Password},
		"dbname":          {c.DB},
		"sslmode":         {c.sslMode()},
		"connect_timeout": {"10"},
		"pool_max_conns":  {strconv.Itoa(c.PoolSize)},
	}
	if c.UseSSL && c.RootCert != "" {
		q.Set("sslrootcert", c.RootCert)
	}
	// Encode writes a space as "+", which libpq's URL syntax does not decode: a literal "+" is
	// already "%2B" there, so every "+" left stands for a space.
	return "postgres://?" + strings.ReplaceAll(q.Encode(), "+", "%20")
}

// envReader reads variables strictly, keeping the first error.
type envReader struct {
	getenv func(string) string
	err    error
}

func (r *envReader) fail(name, value, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("invalid %s=%q: %s", name, value, why)
	}
}

func (r *envReader) str(name, def string) string {
	if v := r.getenv(name); v != "" {
		return v
	}
	return def
}

func (r *envReader) intIn(name string, def, min, max int) int {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < min || n > max {
		r.fail(name, v, fmt.Sprintf("must be an integer between %d and %d", min, max))
		return def
	}
	return n
}

// boolean accepts exactly "true" or "false": anything else is more likely a typo than a choice.
func (r *envReader) boolean(name string, def bool) bool {
	switch v := r.getenv(name); v {
	case "":
		return def
	case "true":
		return true
	case "false":
		return false
	default:
		r.fail(name, v, "must be true or false")
		return def
	}
}
