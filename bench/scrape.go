package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"
)

// ScrapeConfig is the scrape scenario: Queues fresh queues, each holding two messages, every
// tenth read by a consumer group that is left one behind; once the broker's periodic metrics
// read has seen them all, Scrapes scrapes of /metrics/prometheus one after the other. The
// latency is one scrape's; the notes give the page size and how long the periodic read took.
type ScrapeConfig struct {
	Queues  int `json:"queues"`
	Scrapes int `json:"scrapes"`
}

func (c ScrapeConfig) label() string {
	return fmt.Sprintf("scrape /metrics/prometheus, %d queues", c.Queues)
}

var scrapeScenario = scenario{
	name:    "scrape",
	help:    "time of one /metrics/prometheus scrape with --queues queues (--samples scrapes)",
	own:     []string{"samples", "queues"},
	latency: true,
	jobs: func(o *options) []job {
		return []job{newJob("scrape", ScrapeConfig{Queues: o.queues, Scrapes: o.samples}, RunScrape)}
	},
}

// scrapeTarget is the p99 a scrape of 10,000 queues should stay under.
const scrapeTarget = 100 * time.Millisecond

// scrapeChunk is how many queues one push of the setup fills.
const scrapeChunk = 500

func RunScrape(ctx context.Context, t *Target, cfg ScrapeConfig) (*Result, error) {
	if !t.Native {
		return nil, fmt.Errorf("scrape needs this project's broker: it reads queen_cluster_queues")
	}
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	cn := c.conn()
	page, err := cn.do("GET", "/metrics/prometheus", nil)
	if err != nil {
		return nil, fmt.Errorf("cannot scrape the broker: %w", err)
	}
	before, _ := gaugeValue(page, "queen_cluster_queues")

	prefix := freshQueue("scrape")
	name := func(i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }
	var body []byte
	for from := 0; from < cfg.Queues && ctx.Err() == nil; from += scrapeChunk {
		body = append(body[:0], `{"items":[`...)
		n := 0
		for i := from; i < min(from+scrapeChunk, cfg.Queues); i++ {
			for k := range 2 {
				if n > 0 {
					body = append(body, ',')
				}
				body = fmt.Appendf(body, `{"queue":"%s","payload":{"n":%d}}`, name(i), k)
				n++
			}
		}
		body = append(body, "]}"...)
		res, err := cn.push(body, n)
		if err != nil {
			return nil, fmt.Errorf("cannot fill the queues: %w", err)
		}
		for _, r := range res {
			if r.Status != "queued" {
				return nil, fmt.Errorf("cannot fill the queues: an item was %s: %s", r.Status, r.Error)
			}
		}
	}
	for i := 0; i < cfg.Queues && ctx.Err() == nil; i += 10 {
		path := popParams{queue: name(i), batch: 1, autoAck: true, group: "scrape-lagging"}.path()
		if _, err := cn.pop(path); err != nil {
			return nil, fmt.Errorf("cannot read with the consumer group: %w", err)
		}
	}

	// The periodic read runs every QUEEN_METRICS_REFRESH_MS (10 s by default): wait for one
	// that started after the setup (it sees every queue, and the group on every tenth).
	groupSeries := []byte(`queen_consumer_group_lag_messages{consumer_group="scrape-lagging",queue="` + prefix)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if page, err = cn.do("GET", "/metrics/prometheus", nil); err != nil {
			return nil, fmt.Errorf("cannot scrape the broker: %w", err)
		}
		n, _ := gaugeValue(page, "queen_cluster_queues")
		if n >= before+float64(cfg.Queues) && bytes.Count(page, groupSeries) == (cfg.Queues+9)/10 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the broker's periodic metrics read did not show the %d queues and their group within 2 minutes (QUEEN_METRICS_MAX_SERIES too low?)", cfg.Queues)
		}
		time.Sleep(200 * time.Millisecond)
	}

	w := startWindow(ctx, t, 0, time.Duration(cfg.Scrapes)*time.Minute)
	var lat latencies
	var size int
	for range cfg.Scrapes {
		if ctx.Err() != nil {
			break
		}
		start := now()
		b, err := cn.do("GET", "/metrics/prometheus", nil)
		if err != nil {
			return nil, fmt.Errorf("scrape: %w", err)
		}
		lat = append(lat, now()-start)
		size = len(b)
		page = b
	}
	r := newResult("scrape", cfg.label(), t, cfg)
	w.finish(r)
	r.Latency = percentiles(lat)
	pending := bytes.Count(page, []byte(`queen_queue_pending_messages{queue="`+prefix))
	took, _ := gaugeValue(page, "queen_metrics_refresh_seconds")
	r.note("page %d bytes (%.1f MB); %d scrapes; the periodic read of %.0f queues took %.0f ms",
		size, float64(size)/(1<<20), len(lat), before+float64(cfg.Queues), took*1000)
	if r.Latency.P99 > float64(scrapeTarget.Milliseconds()) {
		r.note("p99 over the %d ms target", scrapeTarget.Milliseconds())
	}
	if want := cfg.Queues; pending != want {
		r.fail(fmt.Sprintf("%d queues of the run have a queen_queue_pending_messages series, want %d (QUEEN_METRICS_MAX_SERIES too low?)", pending, want))
	}
	return r.done(), nil
}

// gaugeValue reads the first sample of a Prometheus page whose series starts with series: a
// metric name, or a name and its leading labels without the closing brace. Labels after those
// are allowed: a tenant's queue carries a tenant label after its queue label.
func gaugeValue(page []byte, series string) (float64, bool) {
	prefix := []byte(series)
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), prefix)
		if !ok || len(rest) == 0 || bytes.IndexByte([]byte(" },"), rest[0]) < 0 {
			continue // another series whose name or label value starts the same
		}
		f, err := strconv.ParseFloat(string(rest[bytes.LastIndexByte(rest, ' ')+1:]), 64)
		return f, err == nil
	}
	return 0, false
}
