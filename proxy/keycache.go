package proxy

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"queen/proxy/pxdb"
)

// keyCache keeps API keys found by their secret, so a request does not cost a database round
// trip. It is trusted only while the proxy listens for changes on PostgreSQL's channel
// (changesChannel, notified by the control-plane database on every change to keys and cells):
// a notification empties it, so a revoked key is refused on its next request whichever process
// revoked it. While not listening (at boot, after a lost connection) every lookup reads the
// database.
type keyCache struct {
	store     *pxdb.Store
	listening atomic.Bool
	mu        sync.Mutex
	byHash    map[[32]byte]pxdb.Key
}

// changesChannel is the LISTEN channel of key and cell changes.
const changesChannel = "queen_proxy_changes"

// maxCachedKeys bounds the cache: past it, it starts over.
const maxCachedKeys = 100000

func newKeyCache(store *pxdb.Store) *keyCache {
	return &keyCache{store: store, byHash: map[[32]byte]pxdb.Key{}}
}

func (k *keyCache) lookup(secret string) (pxdb.Key, error) {
	h := sha256.Sum256([]byte(secret))
	if k.listening.Load() {
		k.mu.Lock()
		key, ok := k.byHash[h]
		k.mu.Unlock()
		if ok {
			return key, nil
		}
	}
	ctx, cancel := lookupContext()
	defer cancel()
	key, err := k.store.KeyBySecret(ctx, secret)
	if err != nil {
		return key, err
	}
	if k.listening.Load() {
		k.mu.Lock()
		if len(k.byHash) >= maxCachedKeys {
			k.byHash = map[[32]byte]pxdb.Key{}
		}
		k.byHash[h] = key
		k.mu.Unlock()
	}
	return key, nil
}

func (k *keyCache) clear() {
	k.mu.Lock()
	k.byHash = map[[32]byte]pxdb.Key{}
	k.mu.Unlock()
}

// listen holds a connection listening on changesChannel until ctx ends, reconnecting after a
// second when it is lost. Each notification empties the cache and calls changed (the cells are
// re-read).
func (k *keyCache) listen(ctx context.Context, log *slog.Logger, changed func()) {
	for ctx.Err() == nil {
		err := k.listenOnce(ctx, changed)
		k.listening.Store(false)
		k.clear()
		if ctx.Err() != nil {
			return
		}
		log.Warn("lost the control-plane change feed; API keys are read from the database until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (k *keyCache) listenOnce(ctx context.Context, changed func()) error {
	conn, err := k.store.Pool().Acquire(ctx)
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
	k.clear() // changes before LISTEN took effect are not cached
	k.listening.Store(true)
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return err
		}
		k.clear()
		changed()
	}
}
