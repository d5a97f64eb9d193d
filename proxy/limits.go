package proxy

import (
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/config"
)

// limiter applies the per-key rate limit (QUEEN_PROXY_KEY_RATE, a token bucket of
// QUEEN_PROXY_KEY_BURST) and daily request quota (QUEEN_PROXY_KEY_DAILY_REQUESTS, per UTC day).
// In shadow mode (QUEEN_PROXY_ENFORCE=false) a request over a limit is forwarded anyway and
// logged, at most once a minute per key and kind, with the count of such requests.
type limiter struct {
	rate    float64
	burst   float64
	daily   int64
	enforce bool

	mu   sync.Mutex
	keys map[uuid.UUID]*keyUsage
}

type keyUsage struct {
	tokens   float64
	refilled time.Time
	day      string // UTC date of used
	used     int64
	over     map[string]int64     // requests over each limit since the last log line
	logged   map[string]time.Time // when each limit was last logged
}

func newLimiter(cfg config.Proxy) *limiter {
	return &limiter{rate: cfg.KeyRate, burst: float64(cfg.KeyBurst), daily: cfg.KeyDailyRequests, enforce: cfg.Enforce,
		keys: map[uuid.UUID]*keyUsage{}}
}

// admit counts a request of key and reports whether it may go on; it answers 429 itself when
// enforcing a limit.
func (l *limiter) admit(ctx *fasthttp.RequestCtx, key uuid.UUID, log *slog.Logger) bool {
	if l.rate == 0 && l.daily == 0 {
		return true
	}
	now := time.Now()
	l.mu.Lock()
	u := l.keys[key]
	if u == nil {
		u = &keyUsage{tokens: l.burst, refilled: now, over: map[string]int64{}, logged: map[string]time.Time{}}
		l.keys[key] = u
	}
	over := ""
	if l.rate > 0 {
		u.tokens = min(l.burst, u.tokens+now.Sub(u.refilled).Seconds()*l.rate)
		u.refilled = now
		if u.tokens < 1 {
			over = "rate_limited"
		} else {
			u.tokens--
		}
	}
	if day := now.UTC().Format(time.DateOnly); u.day != day {
		u.day, u.used = day, 0
	}
	if over == "" && l.daily > 0 {
		if u.used >= l.daily {
			over = "quota_exceeded"
		} else {
			u.used++
		}
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
	if report > 0 {
		log.Warn("API key over its limit", "key", key.String(), "limit", over, "requests_over", report, "enforced", l.enforce)
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
