package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Error is a refused request: the HTTP status and the {"error": ...} text the reference uses.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Message) }

func unauthorized(msg string) *Error { return &Error{Status: http.StatusUnauthorized, Message: msg} }

// The refusals with fixed texts.
var (
	ErrAuthRequired     = unauthorized("Authentication required")
	ErrEmptyToken       = unauthorized("Empty token")
	ErrExpired          = unauthorized("Token has expired")
	ErrNotYetValid      = unauthorized("Token not yet valid")
	ErrIssuedInFuture   = unauthorized("Token issued in the future")
	ErrBadSignature     = unauthorized("Invalid token signature")
	ErrBadIssuer        = unauthorized("Invalid token issuer")
	ErrBadAudience      = unauthorized("Invalid token audience")
	ErrForbidden        = &Error{Status: http.StatusForbidden, Message: "Insufficient permissions"}
	ErrJWKSFetch        = &Error{Status: http.StatusInternalServerError, Message: "Failed to fetch JWKS"}
	errNoSecretForHS    = &Error{Status: http.StatusInternalServerError, Message: "HS secret not configured"}
	errInvalidAlgConfig = &Error{Status: http.StatusInternalServerError, Message: "Invalid algorithm configuration"}
)

// maxEcho bounds a client-supplied value (a kid, an alg) echoed in an error.
const maxEcho = 128

// Identity is what a verified token tells the broker.
type Identity struct {
	Subject string // the sub claim ("" when absent): stamped on pushed messages as producerSub
	Roles   Roles
}

// Verifier verifies tokens and decides access. Build it with New; Close stops the JWKS refresh.
type Verifier struct {
	cfg   Config
	plan  *plan
	jwks  *jwksCache // nil without JWT_JWKS_URL
	now   func() time.Time
	roles map[string]Roles
}

// New validates cfg, loads the static keys and, with JWT_JWKS_URL, fetches the JWKS once and
// starts its periodic refresh. A JWKS that cannot be fetched at boot, or that holds no key for
// an algorithm only it can verify, is an error: the broker refuses to start rather than run
// with no way to accept a token.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Verifier, error) {
	if !cfg.Enabled {
		return nil, errors.New("auth.New: JWT is not enabled")
	}
	p, err := cfg.plan()
	if err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg, plan: p, now: time.Now, roles: map[string]Roles{
		cfg.RoleAdmin: RoleAdmin, cfg.RoleReadWrite: RoleReadWrite, cfg.RoleReadOnly: RoleReadOnly, cfg.RoleWriteOnly: RoleWriteOnly,
	}}
	if p.secret != nil && len(p.secret) < 32 {
		log.Warn("JWT_SECRET is shorter than 32 bytes: an HS secret should be at least as long as the hash (256 bits for HS256)")
	}
	if p.jwks != nil {
		if p.jwks.Scheme == "http" {
			log.Warn("JWT_JWKS_URL is plain http: keys fetched in cleartext can be replaced by anyone on the path; use https", "url", cfg.JWKSURL)
		}
		v.jwks = newJWKSCache(cfg.JWKSURL, cfg.JWKSTimeout, cfg.JWKSMinRefetch, log)
		fctx, cancel := context.WithTimeout(ctx, cfg.JWKSTimeout)
		n, err := v.jwks.fetch(fctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("JWT_JWKS_URL=%q: the boot pre-fetch failed (the broker does not start without its keys): %v", cfg.JWKSURL, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("JWT_JWKS_URL=%q: the JWKS holds no usable key (RSA of 2048 bits or more, or Ed25519)", cfg.JWKSURL)
		}
		for _, f := range p.jwksFamilies {
			if v.jwks.count(f) == 0 {
				return nil, fmt.Errorf("JWT_JWKS_URL=%q holds no %s key, and JWT_ALGORITHM=%s needs one", cfg.JWKSURL, f, cfg.Algorithm)
			}
		}
		v.jwks.refreshEvery(cfg.JWKSRefresh, cfg.JWKSTimeout, cfg.refreshed)
	}
	return v, nil
}

// Close stops the JWKS refresh.
func (v *Verifier) Close() {
	if v != nil && v.jwks != nil {
		v.jwks.close()
	}
}

// Algorithms are the token algorithms this verifier accepts.
func (v *Verifier) Algorithms() []string { return slices.Clone(v.plan.algs) }

// KeySource describes where the keys come from, for the boot log.
func (v *Verifier) KeySource() string {
	var parts []string
	if v.plan.secret != nil {
		parts = append(parts, "JWT_SECRET")
	}
	if v.plan.rsaKey != nil {
		parts = append(parts, "JWT_PUBLIC_KEY (RSA)")
	}
	if v.plan.edKey != nil {
		parts = append(parts, "JWT_PUBLIC_KEY (Ed25519)")
	}
	if v.jwks != nil {
		parts = append(parts, fmt.Sprintf("JWKS %s (%d keys, refreshed every %s)", v.cfg.JWKSURL, v.jwks.size(), v.cfg.JWKSRefresh))
	}
	return strings.Join(parts, " + ")
}

// Skip reports whether path is in JWT_SKIP_PATHS (such a path is served without a token).
func (v *Verifier) Skip(path string) bool { return skipped(v.cfg.SkipPaths, path) }

// Authorize checks the Authorization header of a request to a route of level l. A public
// route needs nothing (the header is not read); any other needs a valid token whose roles pass
// the level.
func (v *Verifier) Authorize(header []byte, l Level) (Identity, *Error) {
	if l == Public {
		return Identity{}, nil
	}
	h := bytes.TrimSpace(header)
	if len(h) == 0 {
		return Identity{}, ErrAuthRequired
	}
	if len(h) >= 7 && strings.EqualFold(string(h[:7]), "bearer ") {
		h = bytes.TrimSpace(h[7:])
	} else if strings.EqualFold(string(h), "bearer") {
		h = nil
	}
	if len(h) == 0 {
		return Identity{}, ErrEmptyToken
	}
	id, err := v.Verify(string(h))
	if err != nil {
		return Identity{}, err
	}
	if !Allowed(l, id.Roles) {
		return id, ErrForbidden
	}
	return id, nil
}

// Verify checks a token: its algorithm against the accepted set (before any key lookup), its
// signature, exp/nbf/iat with the clock skew, and iss/aud when configured.
func (v *Verifier) Verify(token string) (Identity, *Error) {
	alg, kid, derr := header(token)
	if derr != nil {
		return Identity{}, derr
	}
	if !slices.Contains(allAlgorithms, alg) {
		return Identity{}, unauthorized("Unsupported algorithm: " + clip(alg))
	}
	if !slices.Contains(v.plan.algs, alg) {
		return Identity{}, unauthorized(fmt.Sprintf("Token uses %s, expected %s", alg, strings.Join(v.plan.algs, "|")))
	}
	key, kerr := v.key(alg, kid)
	if kerr != nil {
		return Identity{}, kerr
	}
	claims := jwt.MapClaims{}
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{alg}),
		jwt.WithLeeway(v.cfg.ClockSkew),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(v.now),
	)
	if _, err := parser.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return key, nil }); err != nil {
		return Identity{}, mapError(err)
	}
	if v.cfg.Issuer != "" {
		if iss, _ := claims["iss"].(string); iss != v.cfg.Issuer {
			return Identity{}, ErrBadIssuer
		}
	}
	if v.cfg.Audience != "" {
		aud, err := claims.GetAudience()
		if err != nil || !slices.Contains(aud, v.cfg.Audience) {
			return Identity{}, ErrBadAudience
		}
	}
	var id Identity
	switch sub := claims["sub"].(type) {
	case nil:
	case string:
		id.Subject = sub
	default:
		return Identity{}, unauthorized("Token verification failed: sub is not a string")
	}
	id.Roles = v.rolesOf(claims)
	return id, nil
}

// header decodes the token's JOSE header.
func header(token string) (alg, kid string, err *Error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", "", unauthorized("Token decode error: a token has three dot-separated parts")
	}
	raw, derr := base64.RawURLEncoding.DecodeString(parts[0])
	if derr != nil {
		return "", "", unauthorized("Token decode error: the header is not base64url")
	}
	var h map[string]any
	if json.Unmarshal(raw, &h) != nil || h == nil {
		return "", "", unauthorized("Token decode error: the header is not a JSON object")
	}
	alg, ok := h["alg"].(string)
	if !ok {
		return "", "", unauthorized("Token decode error: the header has no alg")
	}
	if kid, ok = h["kid"].(string); !ok && h["kid"] != nil {
		return "", "", unauthorized("Token decode error: kid must be a string")
	}
	return alg, kid, nil
}

// key picks the verification key for a token: HS tokens use JWT_SECRET; RS and EdDSA tokens
// use JWT_PUBLIC_KEY when it holds a key of their kind, the JWKS otherwise.
func (v *Verifier) key(alg, kid string) (any, *Error) {
	fam := familyOf(alg)
	switch {
	case fam == famHS && v.plan.secret != nil:
		return v.plan.secret, nil
	case fam == famHS:
		return nil, errNoSecretForHS
	case fam == famRS && v.plan.rsaKey != nil:
		return v.plan.rsaKey, nil
	case fam == famEd && v.plan.edKey != nil:
		return v.plan.edKey, nil
	case v.jwks == nil:
		return nil, errInvalidAlgConfig
	}
	k, ok := v.jwks.lookup(kid, fam)
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.JWKSTimeout)
		fetched, err := v.jwks.refetch(ctx)
		cancel()
		if fetched && err != nil {
			v.jwks.log.Warn("JWKS re-fetch for an unknown kid failed", "url", v.cfg.JWKSURL, "kid", clip(kid), "err", err)
			return nil, ErrJWKSFetch
		}
		if k, ok = v.jwks.lookup(kid, fam); !ok {
			return nil, unauthorized("Unknown key ID: " + clip(kid))
		}
	}
	if k.fam != fam || (k.alg != "" && k.alg != alg) {
		// The kid names a key of another kind, or one its publisher restricted to another alg.
		return nil, ErrBadSignature
	}
	return k.key, nil
}

// mapError turns the library's verdict into the reference's texts.
func mapError(err error) *Error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthorized("Token decode error: " + strings.TrimPrefix(err.Error(), "token is malformed: "))
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return ErrBadSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return ErrExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return ErrNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ErrIssuedInFuture
	}
	return unauthorized("Token verification failed: " + err.Error())
}

// rolesOf reads the roles of the single-value claim and of the array claim. Claim names are
// literal top-level keys.
func (v *Verifier) rolesOf(claims jwt.MapClaims) Roles {
	var r Roles
	if s, ok := claims[v.cfg.RolesClaim].(string); ok {
		r |= v.roles[s]
	}
	switch arr := claims[v.cfg.RolesArrayClaim].(type) {
	case []any:
		for _, x := range arr {
			if s, ok := x.(string); ok {
				r |= v.roles[s]
			}
		}
	case string:
		// The same claim name can be configured for both; a string there is one role.
		r |= v.roles[arr]
	}
	return r
}

// clip bounds a client-supplied value echoed in an error.
func clip(s string) string {
	if len(s) > maxEcho {
		return s[:maxEcho] + "..."
	}
	return s
}
