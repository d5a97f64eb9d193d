// Package auth verifies the JWT bearer tokens of the HTTP API and decides, route by route,
// whether a token's roles grant the route's access level. Five levels that are a set, not a
// ladder: public, read-only, write-only, read-write, admin (a write-only token can push but
// cannot pop or read; a read-only token cannot push).
//
// Keys: an HS secret (JWT_SECRET), a static RSA or Ed25519 public key (JWT_PUBLIC_KEY), and a
// JWKS endpoint (JWT_JWKS_URL) that is fetched at boot, refreshed periodically, and re-fetched
// (throttled) when a token names an unknown kid, so a key rotation needs no restart.
//
// The package does not read the environment: config.Load fills a Config and calls Validate,
// server.Start calls New.
package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// DefaultSkipPaths is the JWT_SKIP_PATHS default (the reference's).
const DefaultSkipPaths = "/health,/metrics/prometheus,/metrics,/"

// Config is the JWT configuration, one field per variable. config.Load fills it only when
// JWT_ENABLED=true; with Enabled false nothing else is read.
type Config struct {
	Enabled        bool          // JWT_ENABLED
	Algorithm      string        // JWT_ALGORITHM, as written (default HS256)
	Secret         string        // JWT_SECRET: HS key, raw bytes
	PublicKey      string        // JWT_PUBLIC_KEY: PEM (RSA or Ed25519); literal \n sequences are accepted
	JWKSURL        string        // JWT_JWKS_URL
	JWKSRefresh    time.Duration // JWT_JWKS_REFRESH_INTERVAL (seconds)
	JWKSTimeout    time.Duration // JWT_JWKS_TIMEOUT_MS
	JWKSMinRefetch time.Duration // JWT_JWKS_MIN_REFETCH_MS: floor between two fetches caused by unknown kids
	Issuer         string        // JWT_ISSUER: checked when not empty
	Audience       string        // JWT_AUDIENCE: checked when not empty
	ClockSkew      time.Duration // JWT_CLOCK_SKEW (seconds), applied to exp, nbf and iat

	RolesClaim      string // JWT_ROLES_CLAIM: a claim holding one role string
	RolesArrayClaim string // JWT_ROLES_ARRAY_CLAIM: a claim holding an array of roles
	RoleAdmin       string // JWT_ROLE_ADMIN
	RoleReadWrite   string // JWT_ROLE_READ_WRITE
	RoleReadOnly    string // JWT_ROLE_READ_ONLY
	RoleWriteOnly   string // JWT_ROLE_WRITE_ONLY

	SkipPaths []string // JWT_SKIP_PATHS

	// refreshed receives the outcome of every periodic JWKS refresh (tests in this package,
	// instead of polling); nil otherwise.
	refreshed chan<- error
}

// Defaults is the configuration with every default applied and JWT on; config.Load starts
// from it.
func Defaults() Config {
	return Config{
		Enabled:         true,
		Algorithm:       "HS256",
		JWKSRefresh:     time.Hour,
		JWKSTimeout:     5 * time.Second,
		JWKSMinRefetch:  5 * time.Second,
		ClockSkew:       30 * time.Second,
		RolesClaim:      "role",
		RolesArrayClaim: "roles",
		RoleAdmin:       "admin",
		RoleReadWrite:   "read-write",
		RoleReadOnly:    "read-only",
		RoleWriteOnly:   "write-only",
		SkipPaths:       mustSkipPaths(DefaultSkipPaths),
	}
}

// allAlgorithms are the token algorithms the broker can verify, in the order they are listed.
var allAlgorithms = []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "EdDSA"}

// family is the key kind an algorithm needs.
type family int

const (
	famHS family = iota
	famRS
	famEd
)

func familyOf(alg string) family {
	switch {
	case strings.HasPrefix(alg, "HS"):
		return famHS
	case strings.HasPrefix(alg, "RS"):
		return famRS
	}
	return famEd
}

func (f family) String() string {
	return [...]string{"HS", "RSA", "Ed25519"}[f]
}

// ParseAlgorithms reads JWT_ALGORITHM: one of HS256, HS384, HS512, RS256, RS384, RS512, EdDSA,
// auto, or a comma-separated list of them (case-insensitive). It returns the accepted token
// algorithms and whether auto was named (auto is narrowed to the algorithms that have key
// material). RS256 accepts RS256, RS384 and RS512 tokens, as the reference does; every other
// name accepts exactly itself.
func ParseAlgorithms(v string) (algs []string, auto bool, err error) {
	set := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		switch strings.ToUpper(part) {
		case "AUTO":
			auto = true
			for _, a := range allAlgorithms {
				set[a] = true
			}
		case "RS256":
			set["RS256"], set["RS384"], set["RS512"] = true, true, true
		case "HS256", "HS384", "HS512", "RS384", "RS512", "EDDSA":
			for _, a := range allAlgorithms {
				if strings.EqualFold(a, part) {
					set[a] = true
				}
			}
		default:
			return nil, false, fmt.Errorf("invalid JWT_ALGORITHM=%q: must be one of %s, auto, or a comma-separated list of them",
				v, strings.Join(allAlgorithms, ", "))
		}
	}
	for _, a := range allAlgorithms {
		if set[a] {
			algs = append(algs, a)
		}
	}
	return algs, auto, nil
}

// ParseSkipPaths reads JWT_SKIP_PATHS: comma-separated paths, each starting with /. An entry
// longer than / that ends with / matches its whole subtree; the others match exactly.
func ParseSkipPaths(v string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("invalid JWT_SKIP_PATHS=%q: every entry must start with / (%q does not)", v, p)
		}
		out = append(out, p)
	}
	return out, nil
}

func mustSkipPaths(v string) []string {
	p, err := ParseSkipPaths(v)
	if err != nil {
		panic(err)
	}
	return p
}

// skipped reports whether path is in the skip list.
func skipped(list []string, path string) bool {
	for _, p := range list {
		if path == p || (len(p) > 1 && strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

// plan is a validated configuration: the accepted algorithms and the static keys.
type plan struct {
	algs   []string
	secret []byte
	rsaKey *rsa.PublicKey
	edKey  ed25519.PublicKey
	jwks   *url.URL
	// jwksFamilies are the key kinds that only the JWKS supplies for an explicitly chosen
	// algorithm: the boot pre-fetch must find at least one key of each.
	jwksFamilies []family
}

// Validate checks everything that can be checked without the network: the algorithm set,
// key material for every chosen algorithm, the PEM, the JWKS URL's shape, the role names, the
// skip paths. Every error names the variable. A disabled configuration is always valid.
func (c Config) Validate() error {
	_, err := c.plan()
	return err
}

func (c Config) plan() (*plan, error) {
	if !c.Enabled {
		return &plan{}, nil
	}
	algs, auto, err := ParseAlgorithms(c.Algorithm)
	if err != nil {
		return nil, err
	}
	p := &plan{}
	if c.Secret != "" {
		p.secret = []byte(c.Secret)
	}
	if c.PublicKey != "" {
		key, err := ParsePublicKeyPEM(c.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("invalid JWT_PUBLIC_KEY: %v", err)
		}
		switch k := key.(type) {
		case *rsa.PublicKey:
			p.rsaKey = k
		case ed25519.PublicKey:
			p.edKey = k
		}
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("invalid JWT_JWKS_URL=%q: must be an http:// or https:// URL", c.JWKSURL)
		}
		p.jwks = u
	}
	has := func(f family) bool {
		switch f {
		case famHS:
			return p.secret != nil
		case famRS:
			return p.rsaKey != nil || p.jwks != nil
		}
		return p.edKey != nil || p.jwks != nil
	}
	needs := map[family]string{
		famHS: "JWT_SECRET",
		famRS: "JWT_PUBLIC_KEY (an RSA public key PEM) or JWT_JWKS_URL",
		famEd: "JWT_PUBLIC_KEY (an Ed25519 public key PEM) or JWT_JWKS_URL",
	}
	for _, a := range algs {
		f := familyOf(a)
		switch {
		case has(f):
			p.algs = append(p.algs, a)
			if f != famHS && !slices.Contains(p.jwksFamilies, f) &&
				((f == famRS && p.rsaKey == nil) || (f == famEd && p.edKey == nil)) {
				p.jwksFamilies = append(p.jwksFamilies, f)
			}
		case auto:
			// auto accepts only what some key can verify.
		default:
			msg := fmt.Sprintf("JWT_ENABLED=true with JWT_ALGORITHM=%s needs %s", c.Algorithm, needs[f])
			if c.PublicKey != "" && f != famHS {
				msg += fmt.Sprintf(" (JWT_PUBLIC_KEY holds an %s key, which cannot verify %s)", otherFamily(p), a)
			}
			return nil, fmt.Errorf("%s", msg)
		}
	}
	if len(p.algs) == 0 {
		return nil, fmt.Errorf("JWT_ENABLED=true with JWT_ALGORITHM=%s needs at least one of JWT_SECRET, JWT_PUBLIC_KEY, JWT_JWKS_URL", c.Algorithm)
	}
	if auto && len(p.jwksFamilies) > 0 {
		// With auto, a JWKS that holds only one kind of key is fine: check "any key" at boot.
		p.jwksFamilies = nil
	}

	for _, v := range []struct{ name, value string }{
		{"JWT_ROLES_CLAIM", c.RolesClaim}, {"JWT_ROLES_ARRAY_CLAIM", c.RolesArrayClaim},
		{"JWT_ROLE_ADMIN", c.RoleAdmin}, {"JWT_ROLE_READ_WRITE", c.RoleReadWrite},
		{"JWT_ROLE_READ_ONLY", c.RoleReadOnly}, {"JWT_ROLE_WRITE_ONLY", c.RoleWriteOnly},
	} {
		if strings.TrimSpace(v.value) == "" {
			return nil, fmt.Errorf("invalid %s=%q: must not be empty", v.name, v.value)
		}
	}
	roles := []struct{ name, value string }{
		{"JWT_ROLE_ADMIN", c.RoleAdmin}, {"JWT_ROLE_READ_WRITE", c.RoleReadWrite},
		{"JWT_ROLE_READ_ONLY", c.RoleReadOnly}, {"JWT_ROLE_WRITE_ONLY", c.RoleWriteOnly},
	}
	for i := range roles {
		for j := i + 1; j < len(roles); j++ {
			if roles[i].value == roles[j].value {
				return nil, fmt.Errorf("invalid %s=%q: it is also %s; the four role names must differ",
					roles[j].name, roles[j].value, roles[i].name)
			}
		}
	}
	for _, sp := range c.SkipPaths {
		if !strings.HasPrefix(sp, "/") {
			return nil, fmt.Errorf("invalid JWT_SKIP_PATHS entry %q: must start with /", sp)
		}
	}
	if c.JWKSTimeout <= 0 || c.JWKSRefresh <= 0 || c.JWKSMinRefetch < 0 || c.ClockSkew < 0 {
		return nil, fmt.Errorf("invalid JWT timing: JWT_JWKS_TIMEOUT_MS and JWT_JWKS_REFRESH_INTERVAL must be positive, JWT_JWKS_MIN_REFETCH_MS and JWT_CLOCK_SKEW not negative")
	}
	return p, nil
}

func otherFamily(p *plan) string {
	if p.rsaKey != nil {
		return "RSA"
	}
	return "Ed25519"
}

// ParsePublicKeyPEM reads an RSA or Ed25519 public key: a PKIX "PUBLIC KEY" block, a PKCS#1
// "RSA PUBLIC KEY" block, or a certificate. Literal \n sequences (an environment variable
// written on one line) are turned into newlines first. RSA keys shorter than 2048 bits are
// refused.
func ParsePublicKeyPEM(s string) (crypto.PublicKey, error) {
	if !strings.Contains(s, "\n") {
		s = strings.ReplaceAll(s, `\n`, "\n")
	}
	block, _ := pem.Decode([]byte(strings.TrimSpace(s)))
	if block == nil {
		return nil, fmt.Errorf("no PEM block found (expected -----BEGIN PUBLIC KEY-----)")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		if strings.Contains(block.Type, "PRIVATE") {
			return nil, fmt.Errorf("the PEM block is a %s; give the public key", block.Type)
		}
		return nil, fmt.Errorf("unsupported PEM block %q (expected PUBLIC KEY)", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("malformed %s: %v", block.Type, err)
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key of %d bits; at least 2048 are required", k.N.BitLen())
		}
		return k, nil
	case ed25519.PublicKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T (expected RSA or Ed25519)", key)
}
