package config

import (
	"fmt"
	"log/slog"
	"time"

	"queen/pg"
)

// Proxy is the configuration of queen-proxy, the front door (docs/proxy.md).
type Proxy struct {
	// DB is the control-plane database (LoadProxyDB).
	DB pg.Settings

	Port     int    // QUEEN_PROXY_PORT
	BindAddr string // QUEEN_PROXY_BIND_ADDR, a bare host
	// TLSCert and TLSKey are PEM files; both or neither. Neither means plaintext.
	TLSCert, TLSKey string

	// JWTSecret signs human sessions; "" turns sign-in off (API keys only).
	JWTSecret  string
	SessionTTL time.Duration

	TenantHeader bool // put the cell's tenant in x-queen-tenant
	// Enforce makes rate limits and quotas refuse (429); false only counts and logs what they
	// would refuse (shadow mode). Body caps always refuse.
	Enforce bool

	UpstreamTimeout time.Duration
	LongPollMax     time.Duration // the longest long-poll forwarded; longer ones are clamped
	LongPollMargin  time.Duration // added to a long-poll's wait: the broker's wait ends first
	MaxBodyBytes    int

	KeyRate          float64 // requests per second per API key; 0: no limit
	KeyBurst         int
	KeyDailyRequests int64 // requests per API key per UTC day; 0: no quota

	CellsRefresh time.Duration
	LogLevel     slog.Level
}

// LoadProxy reads the proxy's configuration from the environment. A malformed value, a port in
// the bind address, or one TLS file without the other is an error naming the variable, before
// anything is bound.
func LoadProxy(getenv func(string) string) (Proxy, error) {
	r := reader{getenv: getenv}
	c := Proxy{
		DB:               r.proxyDB(),
		Port:             r.intIn(6711, 1, 65535, "QUEEN_PROXY_PORT"),
		BindAddr:         r.str("0.0.0.0", "QUEEN_PROXY_BIND_ADDR"),
		TLSCert:          r.str("", "QUEEN_PROXY_TLS_CERT"),
		TLSKey:           r.str("", "QUEEN_PROXY_TLS_KEY"),
		JWTSecret:        r.str("", "QUEEN_PROXY_JWT_SECRET"),
		SessionTTL:       time.Duration(r.intIn(3600, 60, 86400, "QUEEN_PROXY_SESSION_TTL_SECONDS")) * time.Second,
		TenantHeader:     r.boolean(true, "QUEEN_PROXY_TENANT_HEADER"),
		Enforce:          r.boolean(false, "QUEEN_PROXY_ENFORCE"),
		UpstreamTimeout:  r.millis(35000, "QUEEN_PROXY_UPSTREAM_TIMEOUT_MS"),
		LongPollMax:      r.millis(90000, "QUEEN_PROXY_LONGPOLL_MAX_MS"),
		LongPollMargin:   r.millis(10000, "QUEEN_PROXY_LONGPOLL_MARGIN_MS"),
		MaxBodyBytes:     r.intIn(64<<20, 1024, 1<<30, "QUEEN_PROXY_MAX_BODY_BYTES"),
		KeyRate:          r.float(0, "QUEEN_PROXY_KEY_RATE"),
		KeyBurst:         r.intIn(0, 0, 1000000, "QUEEN_PROXY_KEY_BURST"),
		KeyDailyRequests: r.int64In(0, 0, 1<<40, "QUEEN_PROXY_KEY_DAILY_REQUESTS"),
		CellsRefresh:     r.millis(5000, "QUEEN_PROXY_CELLS_REFRESH_MS"),
		LogLevel:         r.level("LOG_LEVEL"),
	}
	r.bareHost(&c.BindAddr, "QUEEN_PROXY_BIND_ADDR", "QUEEN_PROXY_PORT")
	if (c.TLSCert == "") != (c.TLSKey == "") {
		set, unset := "QUEEN_PROXY_TLS_CERT", "QUEEN_PROXY_TLS_KEY"
		if c.TLSCert == "" {
			set, unset = unset, set
		}
		r.fail(unset, "", "must be set with "+set+" (both or neither; neither serves plaintext)")
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < 32 {
		r.fail("QUEEN_PROXY_JWT_SECRET", "<set:"+fmt.Sprint(len(c.JWTSecret))+" chars>", "must be at least 32 characters")
	}
	if c.KeyRate < 0 {
		r.fail("QUEEN_PROXY_KEY_RATE", fmt.Sprint(c.KeyRate), "must be 0 (no limit) or more")
	}
	if c.KeyRate > 0 && c.KeyBurst == 0 {
		c.KeyBurst = max(1, int(c.KeyRate))
	}
	if c.UpstreamTimeout <= 0 {
		r.fail("QUEEN_PROXY_UPSTREAM_TIMEOUT_MS", "0", "must be at least 1")
	}
	if c.CellsRefresh <= 0 {
		r.fail("QUEEN_PROXY_CELLS_REFRESH_MS", "0", "must be at least 1")
	}
	if r.err != nil {
		return Proxy{}, r.err
	}
	return c, nil
}

// LoadProxyDB reads the PXDB_* variables and QUEEN_PROXY_DATA_DIR alone: the front door's
// administration commands need the control-plane database and nothing else of the
// configuration. Unlike PG_PASSWORD, PXDB_PASSWORD has no default.
func LoadProxyDB(getenv func(string) string) (pg.Settings, error) {
	r := reader{getenv: getenv}
	s := r.proxyDB()
	return s, r.err
}

func (r *reader) proxyDB() pg.Settings {
	return r.postgres(postgresVars{prefix: "PXDB_", db: "queen_proxy", poolVar: "PXDB_POOL_SIZE", pool: 16, minPool: 1,
		maxPool: 1000, dataDirVar: "QUEEN_PROXY_DATA_DIR", dataDir: "./data/queen-proxy"})
}

// TLS reports whether the proxy serves TLS.
func (c Proxy) TLS() bool { return c.TLSCert != "" }
