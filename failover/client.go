// Package failover is an HTTP client of the broker's API given several base URLs, which behaves
// as the official clients do with failover on (the JavaScript and Python clients' default, see
// https://queenmq.com): it keeps to one URL, and on a network error or a 5xx answer marks that
// URL unhealthy for five seconds and tries the next, each URL at most once per request. A 4xx
// answer is returned at once. The proxy's tests and the bench's chaos run use it to drive a
// deployment of several front doors as the clients would.
package failover

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// unhealthyFor is how long a URL that failed is passed over (healthRetryAfterMillis).
const unhealthyFor = 5 * time.Second

// Client sends requests to the first healthy URL, starting from the one that answered last.
type Client struct {
	urls  []string
	token string // sent as a bearer token when not ""
	hc    *http.Client

	mu      sync.Mutex
	current int
	down    map[int]time.Time
}

// New returns a client of urls (base URLs, without a trailing slash) sending token.
func New(urls []string, token string, timeout time.Duration) *Client {
	return &Client{urls: urls, token: token, hc: &http.Client{Timeout: timeout, Transport: &http.Transport{}}, down: map[int]time.Time{}}
}

// StatusError is an answer of 400 or more.
type StatusError struct {
	Method, Path string
	Status       int
	Body         []byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, e.Body)
}

// Current is the index of the URL that answered last.
func (c *Client) Current() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// Do sends body (JSON, or nothing when nil) and decodes a 2xx answer into out when not nil.
func (c *Client) Do(method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	c.mu.Lock()
	start := c.current
	c.mu.Unlock()
	var last error
	for i := range c.urls {
		u := (start + i) % len(c.urls)
		c.mu.Lock()
		skip := time.Now().Before(c.down[u]) && i < len(c.urls)-1
		c.mu.Unlock()
		if skip {
			continue
		}
		answer, err := c.send(u, method, path, raw)
		var se *StatusError
		if err == nil || (errors.As(err, &se) && se.Status < 500) {
			c.mu.Lock()
			c.current = u
			c.mu.Unlock()
			if err == nil && out != nil && len(answer) > 0 {
				return json.Unmarshal(answer, out)
			}
			return err
		}
		last = err
		c.mu.Lock()
		c.down[u] = time.Now().Add(unhealthyFor)
		c.mu.Unlock()
	}
	return last
}

func (c *Client) send(u int, method, path string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.urls[u]+path, r)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return nil, &StatusError{Method: method, Path: path, Status: resp.StatusCode, Body: answer}
	}
	return answer, nil
}
