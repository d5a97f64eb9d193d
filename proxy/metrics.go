package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"queen/telemetry"
)

// families are the Prometheus families of one proxy, served at GET /proxy/metrics. Each replica
// counts its own; sum them across replicas.
var families = map[string]string{
	"queen_proxy_requests_total":        "Requests this proxy answered, by route class and HTTP status (class is \"own\" for the proxy's own routes, \"blocked\" for paths the route table refuses).",
	"queen_proxy_upstream_seconds":      "Time from forwarding a request to its cell's broker to the end of the broker's answer, by route class.",
	"queen_proxy_cache_lookups_total":   "Credential lookups, by cache (api_key, session) and result (hit: answered from memory; miss: read from the control-plane database; stale: answered from memory because the control plane could not be reached).",
	"queen_proxy_change_feed_up":        "1 while this proxy follows the control plane's changes (LISTEN); 0 while every credential lookup reads the database.",
	"queen_proxy_limit_refusals_total":  "Requests over an API key's limit (rate_limited, quota_exceeded): refused when enforcing, forwarded and counted in shadow mode.",
	"queen_proxy_usage_syncs_total":     "Exchanges of API key usage with the other proxies through the control plane, by result (ok, error).",
	"queen_proxy_sign_ins_total":        "Sign-in attempts, by result (ok, bad_credentials, throttled, error).",
	"queen_proxy_upstream_errors_total": "Requests that got no answer from their cell, by reason (unavailable: 502, timeout: 504).",
}

func familyHelp(family string) string {
	if h, ok := families[family]; ok {
		return h
	}
	return telemetry.RuntimeHelp(family, "proxy")
}

// upstreamBuckets are the bounds of queen_proxy_upstream_seconds: a long-poll's wait counts.
var upstreamBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// proxyMetrics is one proxy's counters: a Set of its own, so several proxies in one process
// (the tests) keep theirs apart.
type proxyMetrics struct {
	set *metrics.Set
}

func newProxyMetrics(feedUp func() bool) *proxyMetrics {
	m := &proxyMetrics{set: metrics.NewSet()}
	m.set.NewGauge("queen_proxy_change_feed_up", func() float64 {
		if feedUp() {
			return 1
		}
		return 0
	})
	return m
}

func (m *proxyMetrics) counter(name string, labels ...string) *metrics.Counter {
	var b strings.Builder
	b.WriteString(name)
	for i := 0; i+1 < len(labels); i += 2 {
		b.WriteString(map[bool]string{true: "{", false: ","}[i == 0])
		b.WriteString(labels[i])
		b.WriteString(`="`)
		b.WriteString(telemetry.LabelValue(labels[i+1]))
		b.WriteString(`"`)
	}
	if len(labels) > 0 {
		b.WriteString("}")
	}
	return m.set.GetOrCreateCounter(b.String())
}

func (m *proxyMetrics) request(class string, status int) {
	m.counter("queen_proxy_requests_total", "class", class, "status", strconv.Itoa(status)).Inc()
}

func (m *proxyMetrics) upstream(class string, took time.Duration) {
	m.set.GetOrCreatePrometheusHistogramExt(`queen_proxy_upstream_seconds{class="`+telemetry.LabelValue(class)+`"}`, upstreamBuckets).
		Update(took.Seconds())
}

func (m *proxyMetrics) lookup(cache, result string) func() {
	c := m.counter("queen_proxy_cache_lookups_total", "cache", cache, "result", result)
	return c.Inc
}

func (m *proxyMetrics) limitRefusal(limit string) {
	m.counter("queen_proxy_limit_refusals_total", "limit", limit).Inc()
}

func (m *proxyMetrics) usageSync(result string) {
	m.counter("queen_proxy_usage_syncs_total", "result", result).Inc()
}

func (m *proxyMetrics) signIn(result string) {
	m.counter("queen_proxy_sign_ins_total", "result", result).Inc()
}

func (m *proxyMetrics) upstreamError(reason string) {
	m.counter("queen_proxy_upstream_errors_total", "reason", reason).Inc()
}

// serve writes the Prometheus page: the process, then this proxy's families.
func (m *proxyMetrics) serve(ctx *fasthttp.RequestCtx) {
	var page bytes.Buffer
	metrics.WriteProcessMetrics(&page)
	m.set.WritePrometheus(&page)
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.SetBody(telemetry.WithHelp(nil, page.Bytes(), familyHelp))
}
