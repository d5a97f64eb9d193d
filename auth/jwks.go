package auth

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"sync"
	"time"
)

// maxJWKSBytes caps a JWKS document.
const maxJWKSBytes = 1 << 20

// jwk is one usable key of a JWKS.
type jwk struct {
	kid string
	alg string // the JWK's "alg", when it names one: tokens of another alg are refused
	fam family
	key crypto.PublicKey
}

// jwksCache holds the keys of the last successful fetch. Each successful fetch replaces the
// whole set, so a key removed from the endpoint stops verifying at the next fetch.
type jwksCache struct {
	url        string
	client     *http.Client
	log        *slog.Logger
	minRefetch time.Duration
	now        func() time.Time

	mu     sync.RWMutex
	keys   []jwk
	loaded bool // a fetch has succeeded

	fetchMu     sync.Mutex // one fetch at a time
	lastAttempt time.Time  // under fetchMu
	fetches     int        // under fetchMu (tests)

	stop context.CancelFunc // ends the periodic refresh, and a fetch it has in flight
	done chan struct{}
}

func newJWKSCache(url string, timeout, minRefetch time.Duration, log *slog.Logger) *jwksCache {
	return &jwksCache{
		url: url,
		client: &http.Client{
			Timeout: timeout,
			// No redirects: a JWKS that moved is a configuration change, not something to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log:        log,
		minRefetch: minRefetch,
		now:        time.Now,
	}
}

// fetch downloads the JWKS and replaces the cached keys; it returns the number of usable keys.
// On error the cache is left as it was.
func (c *jwksCache) fetch(ctx context.Context) (int, error) {
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	return c.fetchLocked(ctx)
}

func (c *jwksCache) fetchLocked(ctx context.Context) (int, error) {
	c.lastAttempt = c.now()
	c.fetches++
	keys, err := c.download(ctx)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	old, first := c.keys, !c.loaded
	c.keys, c.loaded = keys, true
	c.mu.Unlock()
	if !first && !sameKids(old, keys) { // the boot fetch is reported by the boot line
		c.log.Info("JWKS keys changed", "url", c.url, "keys", len(keys), "kids", kids(keys))
	}
	return len(keys), nil
}

func (c *jwksCache) download(ctx context.Context) ([]jwk, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("the document exceeds %d bytes", maxJWKSBytes)
	}
	return parseJWKS(body)
}

// parseJWKS reads the usable keys of a JWKS document: RSA keys (n, e; 2048 bits or more) and
// OKP Ed25519 keys (x). Other entries, and entries marked "use":"enc", are skipped.
func parseJWKS(body []byte) ([]jwk, error) {
	var doc struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Alg string `json:"alg"`
			Use string `json:"use"`
			Crv string `json:"crv"`
			N   string `json:"n"`
			E   string `json:"e"`
			X   string `json:"x"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("not a JWKS document: %v", err)
	}
	if doc.Keys == nil {
		return nil, errors.New(`not a JWKS document: no "keys" array`)
	}
	var out []jwk
	seen := map[string]bool{}
	for _, k := range doc.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if seen[k.Kid] {
			continue // the first entry of a kid wins
		}
		var key jwk
		switch {
		case k.Kty == "RSA":
			n, err1 := base64.RawURLEncoding.DecodeString(k.N)
			e, err2 := base64.RawURLEncoding.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
				continue
			}
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			if pub.N.BitLen() < 2048 || pub.E < 3 {
				continue
			}
			key = jwk{fam: famRS, key: pub}
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			x, err := base64.RawURLEncoding.DecodeString(k.X)
			if err != nil || len(x) != ed25519.PublicKeySize {
				continue
			}
			key = jwk{fam: famEd, key: ed25519.PublicKey(x)}
		default:
			continue
		}
		key.kid, key.alg = k.Kid, k.Alg
		seen[k.Kid] = true
		out = append(out, key)
	}
	return out, nil
}

// lookup finds the key of kid among the cached keys. An empty kid matches the first cached
// key of the token's kind.
func (c *jwksCache) lookup(kid string, fam family) (jwk, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, k := range c.keys {
		if kid == "" && k.fam == fam {
			return k, true
		}
		if kid != "" && k.kid == kid {
			return k, true
		}
	}
	return jwk{}, false
}

// refetch fetches again unless a fetch was attempted less than minRefetch ago (so a stream of
// tokens with made-up kids cannot hammer the endpoint). It reports whether it fetched.
func (c *jwksCache) refetch(ctx context.Context) (bool, error) {
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	if !c.lastAttempt.IsZero() && c.now().Sub(c.lastAttempt) < c.minRefetch {
		return false, nil
	}
	_, err := c.fetchLocked(ctx)
	return true, err
}

// count returns the number of cached keys of each kind.
func (c *jwksCache) count(fam family) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, k := range c.keys {
		if k.fam == fam {
			n++
		}
	}
	return n
}

func (c *jwksCache) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.keys)
}

// refreshEvery re-fetches the JWKS every interval until close. A failed refresh keeps the
// cached keys and is logged. The outcome of each refresh goes to signal when it is not nil.
func (c *jwksCache) refreshEvery(interval, timeout time.Duration, signal chan<- error) {
	stopped, stop := context.WithCancel(context.Background())
	c.stop, c.done = stop, make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stopped.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(stopped, timeout)
			_, err := c.fetch(ctx)
			if err != nil && stopped.Err() == nil {
				c.log.Warn("JWKS refresh failed; keeping the cached keys", "url", c.url, "err", err)
			}
			cancel()
			if signal != nil {
				select {
				case signal <- err:
				case <-stopped.Done():
				}
			}
		}
	}()
}

func (c *jwksCache) close() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

func kids(keys []jwk) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.kid
	}
	return out
}

func sameKids(a, b []jwk) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].kid != b[i].kid {
			return false
		}
	}
	return true
}
