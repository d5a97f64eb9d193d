package testkit

import (
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// SignJWT signs claims with key under method, naming kid in the header when it is not empty.
func SignJWT(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
