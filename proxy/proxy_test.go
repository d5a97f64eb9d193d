package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/proxy/pxdb"
	"queen/routes"

	"queen/testkit"
)

// A request per class, sent by every kind of credential, gets exactly the answer the route
// table and the credential say: 401 without a valid credential (none, unknown, expired,
// revoked), 403 for another cell or a class not granted, the broker's answer otherwise; a
// blocked route is 404 route_blocked whoever asks.
func TestProxyCredentialMatrix(t *testing.T) {
	t.Parallel()
	broker, token := startCellBroker(t)
	store := openStore(t)
	addCell(t, store, pxdb.Cell{Name: "alpha", Upstream: broker.Base, BrokerToken: token})
	addCell(t, store, pxdb.Cell{Name: "beta", Upstream: broker.Base, BrokerToken: token})
	tp := startProxy(t, store, newTestCA(t), nil)

	// One request per class, each answered 2xx by the broker when forwarded.
	type probe struct {
		class        Class
		method, path string
		body         any
	}
	probes := []probe{
		{Produce, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "matrix", "payload": 1}}}},
		{Consume, "GET", "/api/v1/pop/queue/matrix?batch=1", nil},
		{QueueAdmin, "POST", "/api/v1/configure", map[string]any{"queue": "matrix"}},
		{Read, "GET", "/api/v1/resources/queues", nil},
		{Operator, "GET", "/api/v1/system/maintenance", nil},
		{Blocked, "GET", "/internal/api/shared-state/stats", nil},
	}
	keys := map[Class]string{}
	for _, c := range []Class{Produce, Consume, QueueAdmin, Read, Operator} {
		_, keys[c] = newKey(t, store, "alpha", string(c))
	}
	_, wrongCell := newKey(t, store, "beta", "produce", "consume", "queue_admin", "read", "operator")
	revokedKey, revoked := newKey(t, store, "alpha", "read", "produce")
	must(t, store.RevokeKey(context.Background(), revokedKey.ID, cli))
	expiredKey, expired := newKey(t, store, "alpha", "read", "produce")
	_, err := store.Pool().Exec(context.Background(), `UPDATE queen_proxy.api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, expiredKey.ID)
	must(t, err)

	type cred struct {
		name   string
		header string
		// want is the status and code for a probe of class c.
		want func(c Class) (int, string)
	}
	refusedAll := func(status int, code string) func(Class) (int, string) {
		return func(Class) (int, string) { return status, code }
	}
	creds := []cred{
		{"none", "", refusedAll(401, "unauthenticated")},
		{"bad", "Bearer qpk_not-a-real-key", refusedAll(401, "invalid_credential")},
		{"a broker JWT", "Bearer " + token, refusedAll(401, "invalid_credential")},
		{"expired", "Bearer " + expired, refusedAll(401, "credential_expired")},
		{"revoked", "Bearer " + revoked, refusedAll(401, "credential_revoked")},
		{"wrong cell", "Bearer " + wrongCell, refusedAll(403, "wrong_cell")},
	}
	for _, granted := range []Class{Produce, Consume, QueueAdmin, Read, Operator} {
		creds = append(creds, cred{"key for " + string(granted), "Bearer " + keys[granted], func(c Class) (int, string) {
			if c == granted {
				return 200, ""
			}
			return 403, "class_not_granted"
		}})
	}
	for _, cr := range creds {
		for _, pr := range probes {
			var headers []string
			if cr.header != "" {
				headers = []string{"Authorization", cr.header}
			}
			status, _, body := tp.do("alpha.proxy.test", pr.method, pr.path, pr.body, headers...)
			wantStatus, wantCode := cr.want(pr.class)
			if pr.class == Blocked {
				wantStatus, wantCode = 404, "route_blocked"
			}
			gotCode := codeOf(body)
			if wantStatus == 200 && status >= 200 && status < 300 {
				continue
			}
			if status != wantStatus || gotCode != wantCode {
				t.Errorf("%s, %s %s (%s): %d %s, want %d %s", cr.name, pr.method, pr.path, pr.class, status, body, wantStatus, wantCode)
			}
		}
	}
	// An unknown host with two cells configured.
	if status, _, body := tp.do("gamma.proxy.test", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+keys[Read]); status != 404 || codeOf(body) != "unknown_cell" {
		t.Errorf("unknown cell: %d %s", status, body)
	}
}

// The official clients' flows through the proxy over TLS, with an API key as bearer: push,
// pop, ack, transaction, and a long-poll woken by a push. Every message arrives once, in
// order, with its payload.
func TestProxyClientFlows(t *testing.T) {
	t.Parallel()
	broker, _, store := mainCell(t)
	tp := startProxy(t, store, newTestCA(t), nil)
	_, key := newKey(t, store, "main", "produce", "consume", "queue_admin", "read")
	bearer := []string{"Authorization", "Bearer " + key}
	host := "queen.proxy.test" // one cell: every host name reaches it

	call := func(method, path string, body any, out any) {
		t.Helper()
		status, _, raw := tp.do(host, method, path, body, bearer...)
		if status/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, status, raw)
		}
		if out != nil && len(raw) > 0 {
			must(t, json.Unmarshal(raw, out))
		}
	}
	call("POST", "/api/v1/configure", map[string]any{"queue": "flows"}, nil)
	var pushed []struct {
		Status string `json:"status"`
	}
	call("POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": "flows", "payload": map[string]any{"n": 1}}, {"queue": "flows", "payload": map[string]any{"n": 2}}}}, &pushed)
	if len(pushed) != 2 || pushed[0].Status != "queued" {
		t.Fatalf("push: %+v", pushed)
	}
	type msg struct {
		Data          json.RawMessage `json:"data"`
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		LeaseID       string          `json:"leaseId"`
	}
	var popped struct {
		Messages []msg `json:"messages"`
	}
	call("GET", "/api/v1/pop/queue/flows?batch=10", nil, &popped)
	if len(popped.Messages) != 2 || string(popped.Messages[0].Data) != `{"n":1}` || string(popped.Messages[1].Data) != `{"n":2}` {
		t.Fatalf("pop: %+v", popped)
	}
	m := popped.Messages[0]
	var acked []struct {
		Success bool `json:"success"`
	}
	call("POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID}, &acked)
	if len(acked) != 1 || !acked[0].Success {
		t.Fatalf("ack: %+v", acked)
	}
	m2 := popped.Messages[1]
	var tx struct {
		Success bool `json:"success"`
	}
	call("POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "ack", "transactionId": m2.TransactionID, "partitionId": m2.PartitionID, "leaseId": m2.LeaseID},
		{"type": "push", "items": []map[string]any{{"queue": "flows.out", "payload": map[string]any{"n": 2, "done": true}}}},
	}}, &tx)
	if !tx.Success {
		t.Fatalf("transaction: %+v", tx)
	}

	var out struct {
		Messages []msg `json:"messages"`
	}
	call("GET", "/api/v1/pop/queue/flows.out?batch=10&autoAck=true", nil, &out)
	// The payload comes back as it was pushed: the client's encoding, keys in its order.
	if len(out.Messages) != 1 || string(out.Messages[0].Data) != `{"done":true,"n":2}` {
		t.Fatalf("the transaction's push: %+v", out)
	}

	// A long-poll parked through the proxy, woken by a push through the proxy.
	type result struct {
		msgs []msg
		err  error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", tp.url(host, "/api/v1/pop/queue/flows.out?wait=true&timeout=30000&batch=10"), nil)
		req.Header.Set(bearer[0], bearer[1])
		resp, err := tp.client().Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var out struct {
			Messages []msg `json:"messages"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		done <- result{out.Messages, err}
	}()
	testkit.WaitFor(t, 30*time.Second, "the long-poll to park at the broker", func() bool {
		_, page := broker.Do("GET", "/metrics/prometheus", nil)
		return strings.Contains(string(page), `queen_queue_parked_consumers{queue="flows.out"} 1`)
	})
	call("POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "flows.out", "payload": "wake"}}}, nil)
	r := <-done
	if r.err != nil || len(r.msgs) != 1 || string(r.msgs[0].Data) != `"wake"` {
		t.Fatalf("woken long-poll: %+v %v", r.msgs, r.err)
	}
}

// Path tricks sent as raw bytes never reach a blocked route; what reaches the broker is the
// normalised path.
func TestProxyPathTricksOverTheWire(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	tp := startProxy(t, store, newTestCA(t), nil)
	_, key := newKey(t, store, "main", "produce", "consume", "queue_admin", "read", "operator")
	for _, path := range []string{
		"//internal/api/inter-instance/stats", "/api/v1/push/%2e%2e/%2e%2e/%2e%2e/internal/api/notify",
		"/api/v1/pop/queue/x%2F..%2F..%2F..%2F..%2Finternal%2Fapi%2Fnotify", "/INTERNAL/api/notify",
		"/internal/api/notify/", "/internal;x=1/api/notify", "/api/v1/stats/refresh;/", "/./internal/api/notify",
		"/api/v1/resources/../../../internal/api/shared-state/stats", "/status", "/api/v1/pop",
	} {
		for _, method := range []string{"GET", "POST"} {
			status, body := tp.raw("main.proxy.test", fmt.Sprintf("%s %s HTTP/1.1\r\nHost: main.proxy.test\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", method, path, key))
			if status != 404 || !strings.Contains(body, `"route_blocked"`) {
				t.Errorf("%s %s: %d %s, want 404 route_blocked", method, path, status, body)
			}
		}
	}
	// A normalised path reaches its route: the trailing slash and dot segments are gone.
	status, body := tp.raw("main.proxy.test", "GET /api/v1/x/../resources/./queues/ HTTP/1.1\r\nHost: main.proxy.test\r\nAuthorization: Bearer "+key+"\r\nConnection: close\r\n\r\n")
	if status != 200 || !strings.Contains(body, `"queues"`) {
		t.Errorf("normalised read: %d %s", status, body)
	}
}

// A key revoked by another process (its own connection to the control-plane database, as the
// CLI does) is refused on its next request, though the proxy caches keys.
func TestProxyRevokedKeyRefusedOnNextRequest(t *testing.T) {
	t.Parallel()
	broker, token := startCellBroker(t)
	store, cs := openStoreAt(t)
	addCell(t, store, pxdb.Cell{Name: "main", Upstream: broker.Base, BrokerToken: token})
	tp := startProxy(t, store, nil, nil)
	k, key := newKey(t, store, "main", "read")
	for range 3 { // cached after the first
		if status, _, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key); status != 200 {
			t.Fatalf("before revocation: %d %s", status, body)
		}
	}
	other, err := pxdb.OpenConn(context.Background(), cs, slog.New(slog.NewTextHandler(testLogSink(), nil)))
	must(t, err)
	defer other.Close()
	must(t, other.RevokeKey(context.Background(), k.ID, cli))
	testkit.WaitFor(t, 30*time.Second, "the revocation to reach the proxy", func() bool {
		status, _, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key)
		return status == 401 && codeOf(body) == "credential_revoked"
	})
}

// Two cells on one broker with tenancy: each host name reaches its own tenant's queues.
func TestProxyCellsWithTenancySeeSeparateData(t *testing.T) {
	t.Parallel()
	broker, token := startCellBroker(t, func(c *config.Config) { c.TenancyHeader, c.TrustedProxy = true, true })
	store := openStore(t)
	addCell(t, store, pxdb.Cell{Name: "acme", Upstream: broker.Base, BrokerToken: token, Tenant: "acme"})
	addCell(t, store, pxdb.Cell{Name: "globex", Upstream: broker.Base, BrokerToken: token, Tenant: "globex"})
	tp := startProxy(t, store, newTestCA(t), nil)
	_, acme := newKey(t, store, "acme", "produce", "consume", "read")
	_, globex := newKey(t, store, "globex", "produce", "consume", "read")
	// A client's own x-queen-tenant is replaced by its cell's.
	status, _, body := tp.do("acme.proxy.test", "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "orders", "payload": "acme-only"}}},
		"Authorization", "Bearer "+acme, "x-queen-tenant", "globex")
	if status != 200 {
		t.Fatalf("push: %d %s", status, body)
	}
	status, _, body = tp.do("globex.proxy.test", "GET", "/api/v1/pop/queue/orders?batch=10", nil, "Authorization", "Bearer "+globex)
	if status != 204 && (status != 200 || strings.Contains(string(body), "acme-only")) {
		t.Fatalf("globex popped acme's message: %d %s", status, body)
	}
	status, _, body = tp.do("acme.proxy.test", "GET", "/api/v1/pop/queue/orders?batch=10", nil, "Authorization", "Bearer "+acme)
	if status != 200 || !strings.Contains(string(body), "acme-only") {
		t.Fatalf("acme's pop: %d %s", status, body)
	}
	// Each key only in its own cell.
	if status, _, body := tp.do("globex.proxy.test", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+acme); status != 403 || codeOf(body) != "wrong_cell" {
		t.Fatalf("acme's key at globex: %d %s", status, body)
	}
}

// Every mutating control-plane call leaves an audit row saying who, with which credential, in
// which cell, what, and the answer; so do sign-ins and key creation and revocation. The
// proxy's role cannot update or delete those rows.
func TestProxyAuditsMutatingCalls(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	must(t, store.AddUser(context.Background(), pxdb.User{Name: "ada", Cell: "main", Role: "operator"}, "correct horse battery", cli))
	tp := startProxy(t, store, newTestCA(t), nil)
	k, key := newKey(t, store, "main", "queue_admin", "operator", "read", "produce")
	bearer := []string{"Authorization", "Bearer " + key}

	// Every mutating route of the queue_admin and operator classes, filled in; whatever the
	// broker answers (a seek of a group that does not exist is a 404), the call is audited.
	fill := strings.NewReplacer("{queue}", "audited", "{partition}", "Default", "{group}", "g",
		"{partitionId}", "0190f3c1-0000-7000-8000-000000000001", "{transactionId}", "tx", "{query}", "q.s")
	bodies := map[string]any{
		"/api/v1/configure": map[string]any{"queue": "audited"}, "/api/v1/system/maintenance": map[string]any{"enabled": false},
		"/api/v1/system/maintenance/pop": map[string]any{"enabled": false},
	}
	type call struct{ method, path, class, id string }
	var calls []call
	for _, r := range routes.Table {
		if !(route{class: r.Class}).mutating(r.Method) {
			continue
		}
		path := fill.Replace(r.Path)
		body, ok := bodies[r.Path]
		if !ok {
			body = map[string]any{}
		}
		status, h, raw := tp.do("main.proxy.test", r.Method, path, body, bearer...)
		if status == 401 || status == 403 || status == 404 && codeOf(raw) == "route_blocked" {
			t.Fatalf("%s %s was not forwarded: %d %s", r.Method, path, status, raw)
		}
		calls = append(calls, call{r.Method, path, string(r.Class), h.Get("X-Request-Id")})
	}
	if len(calls) < 10 {
		t.Fatalf("only %d mutating routes", len(calls))
	}
	// Reads and data-plane calls are not audited.
	tp.do("main.proxy.test", "GET", "/api/v1/resources/queues", nil, bearer...)
	tp.do("main.proxy.test", "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "q", "payload": 1}}}, bearer...)
	// A sign-in, refused then accepted.
	tp.do("main.proxy.test", "POST", "/proxy/login", map[string]any{"username": "ada", "password": "wrong"}, "Content-Type", "application/json")
	tp.do("main.proxy.test", "POST", "/proxy/login", map[string]any{"username": "ada", "password": "correct horse battery"}, "Content-Type", "application/json")
	must(t, store.RevokeKey(context.Background(), k.ID, cli))

	ops, err := store.Operations(context.Background(), 1000)
	must(t, err)
	slices.Reverse(ops) // oldest first
	var got []string
	byRequest := map[string]pxdb.Operation{}
	for _, op := range ops {
		got = append(got, fmt.Sprintf("%s|%s|%s|%s|%s|%s|%d", op.Who, op.Credential, op.Cell, op.Method, op.Path, op.Class, op.Status))
		if op.RequestID != "" {
			byRequest[op.RequestID] = op
		}
	}
	who, cred := "key:"+k.ID.String(), "api_key:"+k.ID.String()
	for _, c := range calls {
		op, ok := byRequest[c.id]
		if !ok || op.Who != who || op.Credential != cred || op.Cell != "main" || op.Method != c.method || op.Path != c.path || op.Class != c.class || op.Status == 0 || op.At.IsZero() {
			t.Errorf("%s %s (request %s): audit row %+v", c.method, c.path, c.id, op)
		}
	}
	for _, want := range []string{
		"ada|password||POST|/proxy/login|sign_in|401",
		"ada|password|main|POST|/proxy/login|sign_in|200",
		"cli:test|cli|main|create_key|key/" + k.ID.String() + "|control|0",
		"cli:test|cli|main|revoke_key|key/" + k.ID.String() + "|control|0",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no audit row %q in\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, op := range got {
		if strings.Contains(op, "/api/v1/push") || strings.Contains(op, "GET|/api/v1/resources/queues") {
			t.Errorf("a data-plane or read call was audited: %s", op)
		}
	}
	// The proxy's own connections cannot rewrite history.
	for _, stmt := range []string{`UPDATE queen_proxy.operations SET status = 200`, `DELETE FROM queen_proxy.operations`, `TRUNCATE queen_proxy.operations`} {
		if _, err := store.Pool().Exec(context.Background(), stmt); err == nil {
			t.Errorf("%s succeeded for the proxy's role", stmt)
		}
	}
}

// Sessions: a sign-in sets an HttpOnly, Secure, SameSite=Strict cookie; reads work with it;
// a mutating request with the cookie needs this origin; the dashboard redirects to the
// sign-in page without a session and is served with one.
func TestProxySessions(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	must(t, store.AddUser(context.Background(), pxdb.User{Name: "grace", Cell: "main", Role: "operator"}, "a long enough password", cli))
	must(t, store.AddUser(context.Background(), pxdb.User{Name: "rita", Cell: "main", Role: "reader"}, "another long password", cli))
	tp := startProxy(t, store, newTestCA(t), nil)
	host := "main.proxy.test"

	status, h, body := tp.do(host, "GET", "/", nil)
	if status != 302 || !strings.HasSuffix(h.Get("Location"), "/proxy/login?next=%2F") {
		t.Fatalf("dashboard without a session: %d %v %s", status, h, body)
	}
	if status, _, body := tp.do(host, "GET", "/proxy/login", nil); status != 200 || !strings.Contains(string(body), `<form method="post" action="/proxy/login">`) {
		t.Fatalf("sign-in page: %d %s", status, body)
	}
	login := func(user, password string) string {
		status, h, body := tp.do(host, "POST", "/proxy/login", map[string]any{"username": user, "password": password}, "Content-Type", "application/json")
		if status != 200 {
			t.Fatalf("sign-in of %s: %d %s", user, status, body)
		}
		set := h.Get("Set-Cookie")
		for _, attr := range []string{"queen_session=", "httponly", "secure", "samesite=strict", "path=/"} {
			if !strings.Contains(strings.ToLower(set), attr) {
				t.Fatalf("session cookie %q lacks %s", set, attr)
			}
		}
		return strings.SplitN(set, ";", 2)[0]
	}
	if status, _, body := tp.do(host, "POST", "/proxy/login", map[string]any{"username": "grace", "password": "nope"}, "Content-Type", "application/json"); status != 401 || codeOf(body) != "bad_credentials" {
		t.Fatalf("wrong password: %d %s", status, body)
	}
	if status, _, body := tp.do(host, "POST", "/proxy/login", "username=grace&password=a+long+enough+password", "Content-Type", "application/x-www-form-urlencoded", "Origin", "https://evil.example"); status != 403 || codeOf(body) != "csrf_refused" {
		t.Fatalf("a sign-in form posted from another site: %d %s", status, body)
	}
	status, h, _ = tp.do(host, "POST", "/proxy/login", "username=grace&password=a+long+enough+password&next=%2F%23%2Fqueues", "Content-Type", "application/x-www-form-urlencoded", "Origin", "https://"+host)
	if status != 303 || !strings.HasSuffix(h.Get("Location"), "/#/queues") || !strings.Contains(h.Get("Set-Cookie"), "queen_session=") {
		t.Fatalf("the sign-in form: %d %v", status, h)
	}
	cookie := login("grace", "a long enough password")
	if status, _, body := tp.do(host, "GET", "/api/v1/resources/queues", nil, "Cookie", cookie); status != 200 {
		t.Fatalf("read with the session: %d %s", status, body)
	}
	if status, _, body := tp.do(host, "GET", "/", nil, "Cookie", cookie); status != 200 || !strings.Contains(string(body), "<html") {
		t.Fatalf("the dashboard with the session: %d %.200s", status, body)
	}
	conf := map[string]any{"queue": "from-the-dashboard"}
	if status, _, body := tp.do(host, "POST", "/api/v1/configure", conf, "Cookie", cookie); status != 403 || codeOf(body) != "csrf_refused" {
		t.Fatalf("a mutating request with the cookie and no origin: %d %s", status, body)
	}
	if status, _, body := tp.do(host, "POST", "/api/v1/configure", conf, "Cookie", cookie, "Origin", "https://evil.example"); status != 403 || codeOf(body) != "csrf_refused" {
		t.Fatalf("a mutating request from another origin: %d %s", status, body)
	}
	if status, _, body := tp.do(host, "POST", "/api/v1/configure", conf, "Cookie", cookie, "Origin", "https://"+host); status != 200 {
		t.Fatalf("a mutating request from this origin: %d %s", status, body)
	}
	var me struct {
		AuthMode string   `json:"authMode"`
		Subject  string   `json:"subject"`
		Levels   []string `json:"levels"`
	}
	_, _, body = tp.do(host, "GET", "/auth/me", nil, "Cookie", cookie)
	must(t, json.Unmarshal(body, &me))
	if me.AuthMode != "jwt" || me.Subject != "grace" || !slices.Equal(me.Levels, []string{"read-only", "write-only", "read-write", "admin"}) {
		t.Fatalf("/auth/me of an operator: %s", body)
	}
	reader := login("rita", "another long password")
	_, _, body = tp.do(host, "GET", "/auth/me", nil, "Cookie", reader)
	must(t, json.Unmarshal(body, &me))
	if me.Subject != "rita" || !slices.Equal(me.Levels, []string{"read-only"}) {
		t.Fatalf("/auth/me of a reader: %s", body)
	}
	if status, _, body := tp.do(host, "POST", "/api/v1/configure", conf, "Cookie", reader, "Origin", "https://"+host); status != 403 || codeOf(body) != "class_not_granted" {
		t.Fatalf("a reader configuring: %d %s", status, body)
	}
	if status, _, body := tp.do(host, "GET", "/api/v1/resources/queues", nil, "Cookie", "queen_session=forged.token.value"); status != 401 || codeOf(body) != "session_expired" {
		t.Fatalf("a forged session: %d %s", status, body)
	}
}

// Limits: body caps refuse before forwarding; a long-poll's wait is clamped so the broker
// answers first; an upstream that does not answer is a 504; rate limits and quotas refuse when
// enforced and only log in shadow mode.
func TestProxyLimits(t *testing.T) {
	t.Parallel()
	broker, token := startCellBroker(t)
	store := openStore(t)
	// A TCP listener that accepts and never answers: an upstream stuck for real.
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer stuck.Close()
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	addCell(t, store, pxdb.Cell{Name: "main", Upstream: broker.Base, BrokerToken: token})
	addCell(t, store, pxdb.Cell{Name: "stuck", Upstream: "http://" + stuck.Addr().String()})
	tp := startProxy(t, store, nil, func(c *config.Proxy) {
		c.MaxBodyBytes = 4096
		c.UpstreamTimeout = 300 * time.Millisecond
		c.LongPollMax, c.LongPollMargin = 500*time.Millisecond, 5*time.Second
		c.Enforce, c.KeyRate, c.KeyBurst = true, 0.001, 2
	})
	_, key := newKey(t, store, "main", "produce", "consume", "read", "queue_admin")
	bearer := []string{"Authorization", "Bearer " + key}

	big := map[string]any{"items": []map[string]any{{"queue": "too-big", "payload": strings.Repeat("x", 5000)}}}
	if status, _, body := tp.do("main", "POST", "/api/v1/push", big, bearer...); status != 413 || codeOf(body) != "body_too_large" {
		t.Fatalf("oversized body: %d %s", status, body)
	}
	if status, body := broker.WithHeader("Authorization", "Bearer "+token).Do("GET", "/api/v1/resources/queues/too-big", nil); status != 404 {
		t.Fatalf("the oversized push reached the broker: %d %s", status, body)
	}
	// Clamped: the client asks for a minute; unclamped, the broker would still be waiting when
	// the proxy's deadline (the clamp plus the margin) passed, and the answer would be a 504.
	status, _, body := tp.do("main", "GET", "/api/v1/pop/queue/empty?wait=true&timeout=60000", nil, bearer...)
	if status != 204 && status != 200 {
		t.Fatalf("clamped long-poll: %d %s", status, body)
	}
	// The long-poll took the first of the burst of two (refilled one per 1000 s), this read the
	// second; the next is refused. The oversized push never reached the limiter.
	if status, _, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, bearer...); status != 200 {
		t.Fatalf("within the burst: %d %s", status, body)
	}
	status, h, body := tp.do("main", "GET", "/api/v1/resources/queues", nil, bearer...)
	if status != 429 || codeOf(body) != "rate_limited" || h.Get("Retry-After") == "" {
		t.Fatalf("over the rate: %d %v %s", status, h, body)
	}
	if !strings.Contains(tp.log.String(), "API key over its limit") {
		t.Fatalf("no log line for the refused request:\n%s", tp.log.String())
	}
	_, stuckKey := newKey(t, store, "stuck", "read")
	if status, _, body := tp.do("stuck", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+stuckKey); status != 504 || codeOf(body) != "upstream_timeout" {
		t.Fatalf("stuck upstream: %d %s", status, body)
	}
}

// Shadow mode counts and logs a key over its quota but forwards its requests.
func TestProxyQuotaShadowAndEnforce(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	for _, enforce := range []bool{false, true} {
		tp := startProxy(t, store, nil, func(c *config.Proxy) { c.Enforce, c.KeyDailyRequests = enforce, 2 })
		_, key := newKey(t, store, "main", "read")
		var statuses []int
		for range 4 {
			status, _, _ := tp.do("main", "GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer "+key)
			statuses = append(statuses, status)
		}
		want := []int{200, 200, 200, 200}
		if enforce {
			want = []int{200, 200, 429, 429}
		}
		if !slices.Equal(statuses, want) {
			t.Errorf("enforce=%v: statuses %v, want %v", enforce, statuses, want)
		}
		if !strings.Contains(tp.log.String(), `limit=quota_exceeded`) {
			t.Errorf("enforce=%v: no log line for the quota:\n%s", enforce, tp.log.String())
		}
	}
}

// The certificate reloads without dropping connections: a connection opened before the
// reload keeps working, a new one sees the new certificate.
func TestProxyCertificateReload(t *testing.T) {
	t.Parallel()
	_, _, store := mainCell(t)
	ca := newTestCA(t)
	tp := startProxy(t, store, ca, nil)
	serial := func(c *tls.Conn) int64 { return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64() }
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", tp.addr, &tls.Config{RootCAs: ca.Pool, ServerName: "main.proxy.test"})
		must(t, err)
		return c
	}
	old := dial()
	defer old.Close()
	if serial(old) != 2 {
		t.Fatalf("serial %d", serial(old))
	}
	ca.issue(t, 3)
	must(t, tp.p.ReloadCertificate())
	fresh := dial()
	defer fresh.Close()
	if serial(fresh) != 3 {
		t.Fatalf("after reload: serial %d, want 3", serial(fresh))
	}
	// The old connection still serves requests.
	_, err := fmt.Fprintf(old, "GET /healthz HTTP/1.1\r\nHost: main.proxy.test\r\n\r\n")
	must(t, err)
	buf := make([]byte, 512)
	n, err := old.Read(buf)
	must(t, err)
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("old connection after reload: %q", buf[:n])
	}
	// TLS 1.1 is refused.
	if _, err := tls.Dial("tcp", tp.addr, &tls.Config{RootCAs: ca.Pool, ServerName: "main.proxy.test", MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
}
