package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen/config"
	"queen/failover"
	"queen/proxy/pxdb"
	"queen/server/servertest"
	"queen/testkit"
)

// startReplicas starts n proxies on one control plane, with edit applied to each.
func startReplicas(t *testing.T, store *pxdb.Store, n int, edit func(*config.Proxy)) []*testProxy {
	out := make([]*testProxy, n)
	for i := range out {
		out[i] = startProxy(t, store, nil, edit)
	}
	return out
}

// metric reads one sample of the proxy's own Prometheus page, 0 when it is absent.
func (tp *testProxy) metric(sample string) float64 {
	tp.t.Helper()
	status, _, body := tp.do("main", "GET", "/proxy/metrics", nil)
	if status != 200 {
		tp.t.Fatalf("/proxy/metrics: %d %s", status, body)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			must(tp.t, err)
			return f
		}
	}
	return 0
}

// awaitUsageExchange waits until each proxy has exchanged key usage twice more: the second
// exchange began after anything the test sent before the call.
func awaitUsageExchange(t *testing.T, tps ...*testProxy) {
	t.Helper()
	const sample = `queen_proxy_usage_syncs_total{result="ok"}`
	for _, tp := range tps {
		start := tp.metric(sample)
		testkit.WaitFor(t, 30*time.Second, "a usage exchange of the proxy", func() bool { return tp.metric(sample) >= start+2 })
	}
}

// The daily quota of a key holds across two proxies: each counts what the other admitted.
// Alone, each would admit the whole quota.
func TestReplicasShareTheDailyQuota(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	ps := startReplicas(t, store, 2, func(c *config.Proxy) { c.Enforce, c.KeyDailyRequests = true, 10 })
	a, b := ps[0], ps[1]
	_, key := newKey(t, store, "main", "read")
	get := func(tp *testProxy) int {
		status, _, _ := tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key)
		return status
	}
	for i := range 6 {
		if s := get(a); s != 200 {
			t.Fatalf("request %d through a: %d", i+1, s)
		}
	}
	awaitUsageExchange(t, a, b)
	for i := range 4 {
		if s := get(b); s != 200 {
			t.Fatalf("request %d through b: %d", 7+i, s)
		}
	}
	awaitUsageExchange(t, b, a)
	for name, tp := range map[string]*testProxy{"a": a, "b": b} {
		status, h, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key)
		if status != 429 || codeOf(body) != "quota_exceeded" || h.Get("Retry-After") == "" {
			t.Errorf("request 11 through %s: %d %s, want 429 quota_exceeded", name, status, body)
		}
		if n := tp.metric(`queen_proxy_limit_refusals_total{limit="quota_exceeded"}`); n != 1 {
			t.Errorf("%s counted %v refusals, want 1", name, n)
		}
	}
	var total int64
	must(t, store.Pool().QueryRow(context.Background(), `SELECT sum(requests) FROM queen_proxy.key_usage`).Scan(&total))
	if total != 10 {
		t.Errorf("the control plane counted %d requests, want 10", total)
	}
}

// The rate limit of a key holds across two proxies within what one exchange interval lets
// through: requests spread over both get about the limit once, not once per proxy.
func TestReplicasShareTheRateLimit(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	const rate, burst = 20.0, 4
	ps := startReplicas(t, store, 2, func(c *config.Proxy) { c.Enforce, c.KeyRate, c.KeyBurst = true, rate, burst })
	_, key := newKey(t, store, "main", "read")
	admitted, refused := 0, 0
	// A request every 2 ms, 25 times the rate: enough to keep both buckets empty. Unpaced, the
	// loop made tens of thousands of requests and ran the test process out of file descriptors
	// when the package ran alone.
	pace := time.NewTicker(2 * time.Millisecond)
	defer pace.Stop()
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		<-pace.C
		status, _, body := ps[i%2].do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key)
		switch {
		case status == 200:
			admitted++
		case status == 429 && codeOf(body) == "rate_limited":
			refused++
		default:
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	elapsed := time.Since(start).Seconds()
	// One bucket: burst + rate×elapsed. Each proxy may spend its own bucket and what it
	// refills in one exchange interval before it hears of the other's requests; one interval
	// more for an exchange that runs late on a loaded machine (CI runs this under -race beside
	// other packages: 79 admitted against 78 once). Without the exchange the two buckets admit
	// about 128, well above this.
	shared := float64(2*burst) + rate*(elapsed+3*usageSyncInterval.Seconds())
	perProxy := 2 * (float64(burst) + rate*elapsed)
	t.Logf("%d admitted, %d refused in %.2f s: one bucket allows %.0f, shared with its slack %.0f, one per proxy %.0f",
		admitted, refused, elapsed, burst+rate*elapsed, shared, perProxy)
	if float64(admitted) > shared {
		t.Errorf("%d requests admitted, more than the shared limit allows (%.0f)", admitted, shared)
	}
	if refused == 0 {
		t.Errorf("nothing refused")
	}
}

// A revoked key, a signed-out session and a disabled user's session are refused by every
// proxy; a session signed in at one proxy works at the other.
func TestReplicasRevokeEverywhere(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	ctx := context.Background()
	must(t, store.AddUser(ctx, pxdb.User{Name: "ada", Cell: "main", Role: "reader"}, "a long enough password", cli))
	ps := startReplicas(t, store, 2, nil)
	read := func(tp *testProxy, headers ...string) (int, string) {
		status, _, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, headers...)
		return status, codeOf(body)
	}
	awaitRefused := func(what, code string, headers ...string) {
		t.Helper()
		for i, tp := range ps {
			testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("proxy %d to refuse %s", i, what), func() bool {
				status, got := read(tp, headers...)
				return status == 401 && got == code
			})
		}
	}

	k, key := newKey(t, store, "main", "read")
	for i, tp := range ps {
		for range 2 { // the second from the cache
			if status, code := read(tp, "Authorization", "Bearer "+key); status != 200 {
				t.Fatalf("proxy %d, before revocation: %d %s", i, status, code)
			}
		}
	}
	must(t, store.RevokeKey(ctx, k.ID, cli))
	awaitRefused("the revoked key", "credential_revoked", "Authorization", "Bearer "+key)

	signIn := func(tp *testProxy) string {
		status, h, body := tp.do("main", "POST", "/proxy/login", map[string]any{"username": "ada", "password": "a long enough password"},
			"Content-Type", "application/json")
		if status != 200 {
			t.Fatalf("sign-in: %d %s", status, body)
		}
		return strings.SplitN(h.Get("Set-Cookie"), ";", 2)[0]
	}
	cookie := signIn(ps[0])
	for i, tp := range ps {
		if status, code := read(tp, "Cookie", cookie); status != 200 {
			t.Fatalf("proxy %d with a session signed in at proxy 0: %d %s", i, status, code)
		}
	}
	if status, _, body := ps[1].do("main", "POST", "/proxy/logout", nil, "Cookie", cookie); status != 200 {
		t.Fatalf("sign-out at proxy 1: %d %s", status, body)
	}
	awaitRefused("the signed-out session", "session_expired", "Cookie", cookie)

	cookie = signIn(ps[1])
	if status, code := read(ps[0], "Cookie", cookie); status != 200 {
		t.Fatalf("a new session: %d %s", status, code)
	}
	must(t, store.SetUserDisabled(ctx, "ada", true, cli))
	awaitRefused("the disabled user's session", "session_expired", "Cookie", cookie)
	status, _, body := ps[0].do("main", "POST", "/proxy/login", map[string]any{"username": "ada", "password": "a long enough password"},
		"Content-Type", "application/json")
	if status != 401 || codeOf(body) != "bad_credentials" {
		t.Errorf("a disabled user's sign-in: %d %s", status, body)
	}
}

// Failed sign-ins are throttled per user name and per address, counted across proxies, before
// the password is checked; a success clears the user's count.
func TestReplicasThrottleSignIns(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	ctx := context.Background()
	for _, u := range []string{"ana", "ben"} {
		must(t, store.AddUser(ctx, pxdb.User{Name: u, Cell: "main", Role: "reader"}, "the right password "+u, cli))
	}
	ps := startReplicas(t, store, 2, nil)
	signIn := func(i int, user, password string) (int, string, http.Header) {
		status, h, body := ps[i%2].do("main", "POST", "/proxy/login", map[string]any{"username": user, "password": password},
			"Content-Type", "application/json")
		return status, codeOf(body), h
	}
	for i := range signInLimits.PerUser {
		if status, code, _ := signIn(i, "ana", "wrong"); status != 401 || code != "bad_credentials" {
			t.Fatalf("failure %d of ana: %d %s", i+1, status, code)
		}
	}
	for i := range 2 {
		status, code, h := signIn(i, "ana", "the right password ana")
		if status != 429 || code != "sign_in_throttled" || h.Get("Retry-After") == "" {
			t.Errorf("proxy %d, ana after %d failures with the right password: %d %s", i, signInLimits.PerUser, status, code)
		}
	}
	// Another user from the same address is not held up by ana's failures...
	if status, code, _ := signIn(0, "ben", "the right password ben"); status != 200 {
		t.Fatalf("ben: %d %s", status, code)
	}
	// ...until the address's own count is spent: unknown names count too.
	for i := signInLimits.PerUser; i < signInLimits.PerAddress; i++ {
		if status, code, _ := signIn(i, fmt.Sprintf("nobody%d", i), "wrong"); status != 401 {
			t.Fatalf("failure %d from the address: %d %s", i+1, status, code)
		}
	}
	if status, code, _ := signIn(1, "ben", "the right password ben"); status != 429 || code != "sign_in_throttled" {
		t.Errorf("ben after %d failures from the address: %d %s", signInLimits.PerAddress, status, code)
	}
	if n := ps[0].metric(`queen_proxy_sign_ins_total{result="throttled"}`) + ps[1].metric(`queen_proxy_sign_ins_total{result="throttled"}`); n != 3 {
		t.Errorf("the proxies counted %v throttled sign-ins, want 3", n)
	}
	// A success clears the user's count.
	if _, err := store.Pool().Exec(ctx, `DELETE FROM queen_proxy.sign_in_failures WHERE subject LIKE 'address:%'`); err != nil {
		t.Fatal(err)
	}
	must(t, store.SignInSucceeded(ctx, "ana"))
	if status, code, _ := signIn(0, "ana", "the right password ana"); status != 200 {
		t.Errorf("ana once her count is cleared: %d %s", status, code)
	}
}

// Each proxy serves its own Prometheus page: requests by class and status, credential cache
// lookups, the change feed's state.
func TestReplicaMetricsPage(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	// The key before the proxy: its creation's notification, arriving after the first read,
	// would empty the cache.
	_, key := newKey(t, store, "main", "read")
	tp := startProxy(t, store, nil, nil)
	for range 3 {
		tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key)
	}
	tp.do("main", "GET", "/api/v1/resources/queues", nil)
	tp.do("main", "GET", "/internal/api/anything", nil)
	status, h, body := tp.do("main", "GET", "/proxy/metrics", nil)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("/proxy/metrics: %d %v", status, h)
	}
	for sample, want := range map[string]float64{
		`queen_proxy_requests_total{class="read",status="200"}`:          3,
		`queen_proxy_requests_total{class="read",status="401"}`:          1,
		`queen_proxy_requests_total{class="blocked",status="404"}`:       1,
		`queen_proxy_cache_lookups_total{cache="api_key",result="miss"}`: 1,
		`queen_proxy_cache_lookups_total{cache="api_key",result="hit"}`:  2,
		`queen_proxy_change_feed_up`:                                     1,
		`queen_proxy_upstream_seconds_count{class="read"}`:               3,
		`queen_proxy_requests_total{class="own",status="200"}`:           0, // this scrape is counted after it is written
	} {
		if got := tp.metric(sample); got != want && !(sample == `queen_proxy_requests_total{class="own",status="200"}` && got >= 1) {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	for _, family := range []string{"queen_proxy_requests_total", "queen_proxy_upstream_seconds", "queen_proxy_change_feed_up"} {
		if !bytes.Contains(body, []byte("# HELP "+family+" ")) || !bytes.Contains(body, []byte("# TYPE "+family+" ")) {
			t.Errorf("the page lacks the HELP or TYPE of %s", family)
		}
	}
}

// A client given both proxies keeps producing and consuming when the one it uses dies: every
// message pushed is delivered once, in order, with its payload.
func TestClientWithTwoBaseURLsSurvivesAProxyDeath(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	ps := startReplicas(t, store, 2, nil)
	_, key := newKey(t, store, "main", "produce", "consume", "queue_admin")
	base := func(tp *testProxy) string { return "http://" + tp.addr }
	client := failover.New([]string{base(ps[0]), base(ps[1])}, key, 10*time.Second)
	must(t, client.Do("POST", "/api/v1/configure", map[string]any{"queue": "failover"}, nil))

	const total = 200
	for n := range total {
		if n == total/2 {
			ps[0].kill()
		}
		var res []struct{ Status string }
		item := map[string]any{"queue": "failover", "transactionId": "m" + strconv.Itoa(n), "payload": map[string]any{"n": n}}
		if err := client.Do("POST", "/api/v1/push", map[string]any{"items": []any{item}}, &res); err != nil {
			t.Fatalf("push %d: %v", n, err)
		}
		if len(res) != 1 || (res[0].Status != "queued" && res[0].Status != "duplicate") {
			t.Fatalf("push %d: %+v", n, res)
		}
	}
	var got []int
	for len(got) < total {
		var popped struct {
			Messages []struct {
				TransactionID string `json:"transactionId"`
				PartitionID   string `json:"partitionId"`
				LeaseID       string `json:"leaseId"`
				Data          struct{ N int }
			} `json:"messages"`
		}
		if err := client.Do("GET", "/api/v1/pop/queue/failover?batch=50&wait=true&timeout=2000", nil, &popped); err != nil {
			t.Fatalf("pop: %v", err)
		}
		if len(popped.Messages) == 0 {
			t.Fatalf("nothing more to pop after %d of %d", len(got), total)
		}
		var acks []map[string]any
		for _, m := range popped.Messages {
			got = append(got, m.Data.N)
			acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"})
		}
		if err := client.Do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("delivered %v..., want 0..%d in order, once each", got[:min(len(got), i+5)], total-1)
		}
	}
	if c := client.Current(); c != 1 {
		t.Errorf("the client ended on URL %d, want the surviving proxy (1)", c)
	}
	select {
	case <-ps[0].p.Done():
	default:
		t.Error("the dead proxy still serves")
	}
}

// A cell whose upstream lists two brokers is served while one refuses connections: the proxy
// sends nothing twice, it only moves on when the connection could not be made.
func TestCellWithTwoBrokersSkipsADeadOne(t *testing.T) {
	t.Parallel()
	broker, token := startCellBroker(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // nothing listens there now: connections are refused
	store := openStore(t)
	addCell(t, store, pxdb.Cell{Name: "main", Upstream: deadURL + "," + broker.Base, BrokerToken: token})
	tp := startProxy(t, store, nil, nil)
	_, key := newKey(t, store, "main", "produce", "read")
	for i := range 6 {
		item := map[string]any{"queue": "two-brokers", "transactionId": fmt.Sprintf("m%d", i), "payload": map[string]any{"i": i}}
		status, _, body := tp.do("main", "POST", "/api/v1/push", map[string]any{"items": []any{item}}, "Authorization", "Bearer "+key)
		if status != 201 && status != 200 {
			t.Fatalf("push %d: %d %s", i, status, body)
		}
	}
	status, body := broker.WithHeader("Authorization", "Bearer "+token).Do("GET", "/api/v1/resources/queues/two-brokers", nil)
	if status != 200 || !strings.Contains(string(body), `"pending":6,"processing":0,"total":6}}]`) {
		t.Fatalf("the queue holds other than the 6 messages pushed: %d %s", status, body)
	}
	if n := tp.metric(`queen_proxy_upstream_errors_total{reason="unavailable"}`); n != 0 {
		t.Errorf("%v requests answered 502, want none", n)
	}
}

// While the control-plane database cannot be reached (its PostgreSQL failing over), a key the
// proxy has seen keeps working from memory and an unknown one is refused with 503; once it is
// back, the feed resumes and changes apply again.
func TestProxyRidesAControlPlaneOutage(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	// Both keys exist before the proxy listens for changes: a notification of their creation
	// arriving late would empty the cache the outage is to be ridden on.
	k, key := newKey(t, store, "main", "read")
	_, unseen := newKey(t, store, "main", "read")
	tp := startProxy(t, store, nil, nil)
	read := func(secret string) (int, string) {
		status, _, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+secret)
		return status, codeOf(body)
	}
	// Cached once a read is answered from memory.
	testkit.WaitFor(t, 30*time.Second, "the key to be cached", func() bool {
		if status, code := read(key); status != 200 {
			t.Fatalf("before the outage: %d %s", status, code)
		}
		return tp.metric(`queen_proxy_cache_lookups_total{cache="api_key",result="hit"}`) > 0
	})
	ctx := context.Background()
	cfg := store.Pool().Config().ConnConfig.Copy()
	db := cfg.Database
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	must(t, err)
	t.Cleanup(func() { admin.Close(ctx) }) // after the cleanup below, which uses it
	setConnections := func(allow bool) {
		t.Helper()
		_, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", pgx.Identifier{db}.Sanitize(), allow))
		must(t, err)
		if !allow {
			_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db)
			must(t, err)
		}
	}
	setConnections(false)
	t.Cleanup(func() { setConnections(true) })
	testkit.WaitFor(t, 30*time.Second, "the proxy to lose its change feed", func() bool { return !tp.p.ChangeFeedUp() })
	for range 3 {
		if status, code := read(key); status != 200 {
			t.Fatalf("a key seen before, during the outage: %d %s", status, code)
		}
	}
	if status, code := read(unseen); status != 503 || code != "control_plane_unavailable" {
		t.Errorf("a key not seen before, during the outage: %d %s", status, code)
	}
	if n := tp.metric(`queen_proxy_cache_lookups_total{cache="api_key",result="stale"}`); n < 3 {
		t.Errorf("%v lookups answered from memory, want at least 3", n)
	}
	setConnections(true)
	testkit.WaitFor(t, 30*time.Second, "the change feed to come back", tp.p.ChangeFeedUp)
	must(t, store.RevokeKey(ctx, k.ID, cli))
	testkit.WaitFor(t, 30*time.Second, "the revocation to apply", func() bool {
		status, code := read(key)
		return status == 401 && code == "credential_revoked"
	})
}

// The pushes of one partition keep to one broker of the cell, so that a PostgreSQL outage, after
// which each broker drains its own spool, cannot interleave them.
func TestPushesOfAPartitionKeepToOneBroker(t *testing.T) {
	t.Parallel()
	// Two brokers on two databases: where a message lands tells which broker took it.
	b1, token := startCellBroker(t)
	b2, _ := startCellBroker(t)
	store := openStore(t)
	addCell(t, store, pxdb.Cell{Name: "main", Upstream: b1.Base + "," + b2.Base, BrokerToken: token})
	tp := startProxy(t, store, nil, nil)
	_, key := newKey(t, store, "main", "produce")
	for _, part := range []string{"a", "b", "c", "d"} {
		for i := range 5 {
			item := map[string]any{"queue": "affinity", "partition": part, "payload": map[string]any{"i": i}}
			if status, _, body := tp.do("main", "POST", "/api/v1/push", map[string]any{"items": []any{item}}, "Authorization", "Bearer "+key); status != 201 && status != 200 {
				t.Fatalf("push: %d %s", status, body)
			}
		}
	}
	var landed []string
	for _, b := range []*servertest.Client{b1, b2} {
		status, body := b.WithHeader("Authorization", "Bearer "+token).Do("GET", "/api/v1/resources/queues/affinity", nil)
		if status == 404 {
			continue
		}
		var q struct {
			Partitions []struct {
				Name  string
				Stats struct{ Total int }
			}
		}
		must(t, json.Unmarshal(body, &q))
		for _, p := range q.Partitions {
			if p.Stats.Total != 5 {
				t.Errorf("partition %s has %d messages on one broker, want all 5", p.Name, p.Stats.Total)
			}
			landed = append(landed, p.Name)
		}
	}
	if slices.Sort(landed); !slices.Equal(landed, []string{"a", "b", "c", "d"}) {
		t.Errorf("partitions found %v, want each once", landed)
	}
}
