package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/config"
	"queen/proxy/pxdb"
)

// limiter applies the per-key rate limit (QUEEN_PROXY_KEY_RATE, a token bucket of
// QUEEN_PROXY_KEY_BURST) and daily request quota (QUEEN_PROXY_KEY_DAILY_REQUESTS, per UTC day).
// In shadow mode (QUEEN_PROXY_ENFORCE=false) a request over a limit is forwarded anyway and
// logged, at most once a minute per key and kind, with the count of such requests.
//
// The limits hold across every proxy of one control plane by shared counters: each proxy
// admits from its own bucket and count, and every usageSyncInterval adds what it admitted to
// the key's total of the day in queen_proxy.key_usage, learning from the total what the other
// proxies admitted meanwhile. That is taken from its bucket (down to minus one burst) and added
// to its count. So a client spread over several proxies, or moving from one to another, gets
// the limit once, not once per proxy. What a burst can overshoot: what the other proxies admit
// within one interval before they hear of it (at most the bucket each holds, or the remainder
// of the quota each sees); a proxy that starts mid-day learns the day's total at its first
// exchange. While the control plane cannot be reached each proxy applies the limits alone,
// logs it once a minute, and adds what it admitted once it can.
type limiter struct {
	rate    float64
	burst   float64
	daily   int64
	enforce bool
	store   *pxdb.Store
	metrics *proxyMetrics
	log     *slog.Logger

	mu          sync.Mutex
	keys        map[uuid.UUID]*keyUsage
	syncFailing time.Time // when the last failed exchange was logged; zero while they succeed
}

// usageSyncInterval is how often a proxy exchanges key usage with the others.
const usageSyncInterval = 250 * time.Millisecond

// idleKeyAfter is how long a key without requests here stays in the exchange (so that this
// proxy keeps learning what the others admit) and in memory.
const idleKeyAfter = 2 * time.Minute

type keyUsage struct {
	tokens   float64
	refilled time.Time
	day      string // UTC date of used
	used     int64  // requests of the day: every proxy's as last learned, and this one's since
	pending  int64  // admitted here since the last exchange
	total    int64  // the day's total the last exchange returned; -1 before the first
	lastUsed time.Time
	over     map[string]int64     // requests over each limit since the last log line
	logged   map[string]time.Time // when each limit was last logged
}

func newLimiter(cfg config.Proxy, store *pxdb.Store, m *proxyMetrics, log *slog.Logger) *limiter {
	return &limiter{rate: cfg.KeyRate, burst: float64(cfg.KeyBurst), daily: cfg.KeyDailyRequests, enforce: cfg.Enforce,
		store: store, metrics: m, log: log, keys: map[uuid.UUID]*keyUsage{}}
}

func (l *limiter) on() bool { return l.rate > 0 || l.daily > 0 }

// admit counts a request of key and reports whether it may go on; it answers 429 itself when
// enforcing a limit.
func (l *limiter) admit(ctx *fasthttp.RequestCtx, key uuid.UUID) bool {
	if !l.on() {
		return true
	}
	now := time.Now()
	l.mu.Lock()
	u := l.keys[key]
	if u == nil {
		u = &keyUsage{tokens: l.burst, refilled: now, total: -1, over: map[string]int64{}, logged: map[string]time.Time{}}
		l.keys[key] = u
	}
	u.lastUsed = now
	over := ""
	if l.rate > 0 {
		u.tokens = min(l.burst, u.tokens+now.Sub(u.refilled).Seconds()*l.rate)
		u.refilled = now
		if u.tokens < 1 {
			over = "rate_limited"
		}
	}
	if day := now.UTC().Format(time.DateOnly); u.day != day {
		u.day, u.used, u.total = day, 0, -1
	}
	if over == "" && l.daily > 0 && u.used >= l.daily {
		over = "quota_exceeded"
	}
	if over == "" || !l.enforce {
		// Forwarded: it counts, in shadow mode too, as the other proxies count it.
		if l.rate > 0 && u.tokens >= 1 {
			u.tokens--
		}
		u.used++
		u.pending++
	}
	var report int64
	if over != "" {
		u.over[over]++
		if now.Sub(u.logged[over]) >= time.Minute {
			report, u.over[over], u.logged[over] = u.over[over], 0, now
		}
	}
	l.mu.Unlock()
	if over == "" {
		return true
	}
	l.metrics.limitRefusal(over)
	if report > 0 {
		l.log.Warn("API key over its limit", "key", key.String(), "limit", over, "requests_over", report, "enforced", l.enforce)
	}
	if !l.enforce {
		return true
	}
	retry := "1"
	if over == "quota_exceeded" {
		tomorrow := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		retry = strconv.Itoa(int(tomorrow.Sub(now).Seconds()) + 1)
	}
	ctx.Response.Header.Set("Retry-After", retry)
	writeJSON(ctx, fasthttp.StatusTooManyRequests, answer{Code: over, Error: "this API key is over its " + map[string]string{
		"rate_limited": "request rate (QUEEN_PROXY_KEY_RATE)", "quota_exceeded": "daily requests (QUEEN_PROXY_KEY_DAILY_REQUESTS)"}[over]})
	return false
}

// sync exchanges usage with the other proxies: what this one admitted since the last exchange
// goes into the day's totals, and the totals say what the others admitted.
func (l *limiter) sync(ctx context.Context) {
	if !l.on() {
		return
	}
	// What each key admitted here since the last exchange, by day.
	type exchange struct {
		ids      []uuid.UUID
		admitted []int64
	}
	now := time.Now()
	l.mu.Lock()
	byDay := map[string]*exchange{}
	for id, u := range l.keys {
		if u.pending == 0 && now.Sub(u.lastUsed) >= idleKeyAfter {
			delete(l.keys, id)
			continue
		}
		e := byDay[u.day]
		if e == nil {
			e = &exchange{}
			byDay[u.day] = e
		}
		e.ids, e.admitted = append(e.ids, id), append(e.admitted, u.pending)
	}
	l.mu.Unlock()

	for day, e := range byDay {
		date, _ := time.Parse(time.DateOnly, day)
		totals, err := l.store.AddKeyUsage(ctx, date, e.ids, e.admitted)
		if err != nil {
			l.syncFailed(ctx, err)
			return
		}
		l.learn(day, e.ids, e.admitted, totals)
	}
	l.metrics.usageSync("ok")
	l.mu.Lock()
	if !l.syncFailing.IsZero() {
		l.log.Info("API key usage is shared with the other proxies again")
		l.syncFailing = time.Time{}
	}
	l.mu.Unlock()
}

// learn applies an exchange's totals: the others' requests are what the total grew by beyond
// what this proxy added.
func (l *limiter) learn(day string, ids []uuid.UUID, admitted, totals []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range ids {
		u := l.keys[id]
		if u == nil || u.day != day {
			continue // forgotten or a new day meanwhile: the next exchange starts it over
		}
		u.pending -= admitted[i]
		others := int64(0)
		if u.total >= 0 {
			others = max(0, totals[i]-u.total-admitted[i])
		}
		u.total = totals[i]
		u.used = totals[i] + u.pending
		if l.rate > 0 {
			u.tokens = max(-l.burst, u.tokens-float64(others))
		}
	}
}

func (l *limiter) syncFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	l.metrics.usageSync("error")
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.syncFailing) >= time.Minute {
		l.syncFailing = time.Now()
		l.log.Warn("cannot share API key usage with the other proxies: each applies the limits alone until the control plane is back", "err", err)
	}
}
