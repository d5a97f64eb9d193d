package proxy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"queen/proxy/pxdb"
)

// changeFeed follows the control plane's changes on PostgreSQL's channel changesChannel,
// notified by the control-plane database on every change to keys, cells, users and sessions
// (migrations 0002 and 0003), whichever process made it: another proxy, the CLI. The caches
// (feedCache) answer from memory only while it listens, and are emptied at each notification
// and each time it starts listening, so a revoked key or an ended session is refused on its
// next request by every proxy.
type changeFeed struct {
	store     *pxdb.Store
	listening atomic.Bool
	// unreachableUntil (Unix nanoseconds): a lookup failed to reach the control plane, and the
	// caches answer from memory without trying again until then.
	unreachableUntil atomic.Int64
	mu               sync.Mutex
	onChange         []func()
}

// changesChannel is the LISTEN channel of control-plane changes.
const changesChannel = "queen_proxy_changes"

// subscribe adds f to what runs at each notification, and when the feed starts listening.
func (f *changeFeed) subscribe(fn func()) {
	f.mu.Lock()
	f.onChange = append(f.onChange, fn)
	f.mu.Unlock()
}

func (f *changeFeed) changed() {
	f.mu.Lock()
	fns := f.onChange
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// listen holds a connection listening on changesChannel until ctx ends, reconnecting after a
// second when it is lost.
func (f *changeFeed) listen(ctx context.Context, log *slog.Logger) {
	for ctx.Err() == nil {
		err := f.listenOnce(ctx)
		// The caches keep what they hold: while the control plane cannot be reached they
		// answer from it (feedCache.get), and they are emptied when the feed is back.
		f.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		log.Warn("lost the control-plane change feed; API keys and sessions are read from the database until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (f *changeFeed) listenOnce(ctx context.Context) error {
	conn, err := f.store.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: it stays LISTENing, and a listening connection must not
	// serve other statements.
	c := conn.Hijack()
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "LISTEN "+changesChannel); err != nil {
		return err
	}
	f.changed() // what changed before LISTEN took effect is not cached
	f.listening.Store(true)
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return err
		}
		f.changed()
	}
}

// feedCache keeps what load found for a key, so that a request does not cost a database round
// trip; it answers from memory while the feed listens, and is emptied at each change. While the
// feed is down it reads the database, and answers from memory only when the database cannot be
// reached: a credential already seen keeps working through a failover of the control plane's
// PostgreSQL (a change made meanwhile applies once the feed is back), an unknown one is refused.
type feedCache[K comparable, V any] struct {
	feed *changeFeed
	max  int // past it, the cache starts over
	// hit and miss count lookups answered from memory and from the database.
	hit, miss, stale func()
	mu               sync.Mutex
	entries          map[K]V
	gen              uint64 // counts clears: a value loaded across one is not kept
}

func newFeedCache[K comparable, V any](feed *changeFeed, max int, hit, miss, stale func()) *feedCache[K, V] {
	c := &feedCache[K, V]{feed: feed, max: max, hit: hit, miss: miss, stale: stale, entries: map[K]V{}}
	feed.subscribe(c.clear)
	return c
}

// get returns the value of k, from memory or from load.
func (c *feedCache[K, V]) get(k K, load func() (V, error)) (V, error) {
	c.mu.Lock()
	v, ok := c.entries[k]
	gen := c.gen
	c.mu.Unlock()
	if ok && c.feed.listening.Load() {
		c.hit()
		return v, nil
	}
	if ok && time.Now().UnixNano() < c.feed.unreachableUntil.Load() {
		c.stale()
		return v, nil
	}
	c.miss()
	fresh, err := load()
	if err != nil {
		if !errors.Is(err, pxdb.ErrNotFound) {
			c.feed.unreachableUntil.Store(time.Now().Add(time.Second).UnixNano())
			if ok {
				c.stale()
				return v, nil
			}
		}
		return fresh, err
	}
	v = fresh
	c.mu.Lock()
	if c.gen == gen {
		if len(c.entries) >= c.max {
			c.entries = map[K]V{}
		}
		c.entries[k] = v
	}
	c.mu.Unlock()
	return v, nil
}

func (c *feedCache[K, V]) clear() {
	c.mu.Lock()
	c.entries = map[K]V{}
	c.gen++
	c.mu.Unlock()
}
