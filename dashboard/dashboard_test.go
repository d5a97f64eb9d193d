package dashboard_test

// The dashboard tests drive a headless Chromium (Debian's chromium package) against a real
// broker over loopback and a real PostgreSQL. With QUEEN_DASHBOARD_SCREENSHOTS=1 they also
// write the screenshots of docs/dashboard/.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"queen/auth"
	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// chromium finds the browser; the tests fail (not skip) without it.
func chromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("chromium not found: the dashboard tests need Debian's chromium package (apt-get install -y chromium)")
	return ""
}

// page is one headless browser tab that records every console error, uncaught exception and
// failed request.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	mu   sync.Mutex
	errs []string
}

func open(t *testing.T, base string) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.Headless,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp logs the browser events it does not model; they go to the test's log.
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	p := &page{t: t, ctx: ctx, base: base}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				p.fail("console error: " + strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			p.fail("uncaught exception: " + e.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			if e.Entry.Level == log.LevelError {
				p.fail("browser log error: " + e.Entry.Text + " " + e.Entry.URL)
			}
		case *network.EventLoadingFailed:
			p.fail("request failed: " + e.ErrorText)
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				p.fail(fmt.Sprintf("request answered %d: %s", e.Response.Status, e.Response.URL))
			}
		}
	})
	// The first Run starts the browser and must use the tab's own context: a browser started
	// under a shorter-lived context would close with it.
	if err := chromedp.Run(ctx, network.Enable(), log.Enable(), runtime.Enable()); err != nil {
		t.Fatalf("cannot start chromium: %v", err)
	}
	return p
}

func (p *page) fail(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, msg)
}

// clean fails the test with every error the browser reported so far.
func (p *page) clean(where string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		p.t.Errorf("%s: %s", where, e)
	}
	p.errs = nil
}

func (p *page) run(actions ...chromedp.Action) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var main string
		_ = chromedp.Run(p.ctx, chromedp.Evaluate(`document.body.innerText`, &main))
		p.mu.Lock()
		defer p.mu.Unlock()
		p.t.Fatalf("browser: %v\nthe page shows:\n%s\nbrowser errors: %q", err, main, p.errs)
	}
}

// goTo opens a dashboard route (the part after #/) and waits until sel is visible.
func (p *page) goTo(route, sel string) {
	p.t.Helper()
	p.run(chromedp.Navigate(p.base+"/#/"+route), chromedp.WaitVisible(sel, chromedp.ByQuery))
}

// waitText waits until the main area holds s (textContent: the CSS may capitalise).
func (p *page) waitText(s string) {
	p.t.Helper()
	js := fmt.Sprintf(`document.querySelector('main').textContent.includes(%q)`, s)
	p.run(chromedp.Poll(js, nil, chromedp.WithPollingInterval(50*time.Millisecond)))
}

// confirm clicks sel, checks that the confirmation names what will happen, and confirms.
func (p *page) confirm(sel, says string) {
	p.t.Helper()
	var text string
	p.run(chromedp.Click(sel, chromedp.ByQuery), chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery),
		chromedp.Text("#confirm-text", &text, chromedp.ByQuery))
	if !strings.Contains(text, says) {
		p.t.Errorf("the confirmation says %q, want it to mention %q", text, says)
	}
	p.run(chromedp.Click("#confirm-ok", chromedp.ByQuery))
}

// toast waits for an action's result.
func (p *page) toast(s string) {
	p.t.Helper()
	js := fmt.Sprintf(`[...document.querySelectorAll('.toast')].some(t => t.innerText.includes(%q))`, s)
	p.run(chromedp.Poll(js, nil, chromedp.WithPollingInterval(50*time.Millisecond)))
}

// shot writes docs/dashboard/name.png when QUEEN_DASHBOARD_SCREENSHOTS=1.
func (p *page) shot(name string) {
	p.t.Helper()
	if os.Getenv("QUEEN_DASHBOARD_SCREENSHOTS") != "1" {
		return
	}
	var buf []byte
	p.run(chromedp.FullScreenshot(&buf, 100))
	path := filepath.Join("..", "docs", "dashboard", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func push(t *testing.T, c *servertest.Client, queue, partition, tx string, payload any) {
	t.Helper()
	var out []map[string]any
	c.JSON("POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": queue, "partition": partition, "transactionId": tx, "payload": payload},
	}}, 200, &out)
}

type popped struct {
	LeaseID  *string `json:"leaseId"`
	Messages []struct {
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		Data          json.RawMessage `json:"data"`
	} `json:"messages"`
}

func pop(t *testing.T, c *servertest.Client, queue string, kv ...string) popped {
	t.Helper()
	q := url.Values{"batch": {"1"}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	var out popped
	status, body := c.Do("GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+q.Encode(), nil)
	if status == 204 {
		return out
	}
	if status != 200 || json.Unmarshal(body, &out) != nil {
		t.Fatalf("pop %s: %d %s", queue, status, body)
	}
	return out
}

// Every page loads without a console error or a failed request, and a pushed message shows
// on the queues, queue and messages pages and opens with its payload.
func TestPagesShowAPushedMessage(t *testing.T) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	push(t, c, "orders.created", "eu", "order-1", map[string]any{"order": 1, "item": "book"})
	// A consumer group reads it (the queue-mode position is untouched: the message stays
	// pending), so the consumer-groups page has a row.
	if got := pop(t, c, "orders.created", "consumerGroup", "billing"); len(got.Messages) != 1 {
		t.Fatalf("pop for group billing: %+v", got)
	}
	// The overview charts the cluster's per-minute statistics: flushed now, they hold the push
	// and the pop at once.
	c.JSON("POST", "/api/v1/stats/refresh", nil, 200, nil)
	p := open(t, c.Base)

	p.goTo("", "figure.chart-box")
	p.waitText("1 pushed, 1 popped, 0 acknowledged in the last hour")
	p.run(chromedp.Poll(`document.querySelectorAll('svg.chart path').length === 3`, nil, chromedp.WithPollingInterval(100*time.Millisecond)))
	p.waitText("Pending messages")
	p.waitText("this broker")
	p.waitText("push off")
	p.clean("overview")

	p.goTo("queues", `a[href="#/queues/orders.created"]`)
	p.shot("queues")
	p.clean("queues")

	p.goTo("queues/orders.created", "dl.options")
	p.waitText("eu")
	p.waitText("Retry limit")
	p.shot("queue")
	p.clean("queue page")

	p.goTo("messages?queue=orders.created", `a[href^="#/messages/"]`)
	p.waitText("order-1")
	p.shot("messages")
	p.run(chromedp.Click(`a[href^="#/messages/"]`, chromedp.ByQuery), chromedp.WaitVisible("pre.payload", chromedp.ByQuery))
	var payload string
	p.run(chromedp.Text("pre.payload", &payload, chromedp.ByQuery))
	var got map[string]any
	if err := json.Unmarshal([]byte(payload), &got); err != nil || got["item"] != "book" || !strings.Contains(payload, "\n  ") {
		t.Errorf("message page payload %q, want the pushed payload pretty-printed", payload)
	}
	p.shot("message")
	p.clean("message page")

	p.goTo("groups", "table")
	p.waitText("billing")
	p.shot("consumer-groups")
	p.clean("groups")
	p.goTo("dlq", "main p.empty")
	p.clean("dlq")
	p.goTo("maintenance", "#switch-push")
	p.clean("maintenance")

	p.goTo("", "figure.chart-box")
	p.run(chromedp.Poll(`document.querySelectorAll('svg.chart path').length === 3`, nil, chromedp.WithPollingInterval(100*time.Millisecond)))
	p.shot("overview")
	if os.Getenv("QUEEN_DASHBOARD_SCREENSHOTS") == "1" {
		p.run(emulation.SetDeviceMetricsOverride(390, 844, 2, true))
		p.goTo("queues", `a[href="#/queues/orders.created"]`)
		p.shot("phone-queues")
	}
	p.clean("overview")
}

// A message failed beyond its retry limit shows on the dead-letter page with its error;
// replaying it there makes it poppable again with the same payload.
func TestDeadLetterReplayFromThePage(t *testing.T) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	var conf map[string]any
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "payments", "options": map[string]any{"retryLimit": 0}}, 200, &conf)
	push(t, c, "payments", "Default", "pay-7", map[string]any{"amount": 42})
	m := pop(t, c, "payments")
	if len(m.Messages) != 1 {
		t.Fatalf("pop: %+v", m)
	}
	var ack []map[string]any
	c.JSON("POST", "/api/v1/ack", map[string]any{"transactionId": "pay-7", "partitionId": m.Messages[0].PartitionID,
		"leaseId": *m.LeaseID, "status": "failed", "error": "card declined"}, 200, &ack)
	if len(ack) != 1 || ack[0]["dlq"] != true {
		t.Fatalf("the failed ack did not dead-letter the message: %v", ack)
	}
	if again := pop(t, c, "payments"); len(again.Messages) != 0 {
		t.Fatalf("a dead letter was delivered: %+v", again)
	}

	p := open(t, c.Base)
	p.goTo("dlq", `button[aria-label="Replay pay-7"]`)
	p.waitText("card declined")
	p.shot("dead-letters")
	p.confirm(`button[aria-label="Replay pay-7"]`, "queue payments")
	p.toast("Replayed into payments/Default")
	p.waitText("No dead letters.")
	p.clean("dead letters")

	got := pop(t, c, "payments")
	if len(got.Messages) != 1 || !strings.HasPrefix(got.Messages[0].TransactionID, "pay-7:replay:") {
		t.Fatalf("after the replay, pop gave %+v", got)
	}
	var payload map[string]any
	if err := json.Unmarshal(got.Messages[0].Data, &payload); err != nil || payload["amount"] != 42.0 {
		t.Fatalf("replayed payload %s", got.Messages[0].Data)
	}
}

type maintenanceState struct {
	MaintenanceMode    bool `json:"maintenanceMode"`
	PopMaintenanceMode bool `json:"popMaintenanceMode"`
}

// The push maintenance switch, confirmed in the page, changes what the API reports.
func TestMaintenanceSwitchFromThePage(t *testing.T) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	p := open(t, c.Base)
	p.goTo("maintenance", "#switch-push")
	p.waitText("Records waiting")
	p.confirm("#switch-push", "Producers keep getting their pushes accepted")
	p.toast("Maintenance mode ENABLED")
	var st maintenanceState
	c.JSON("GET", "/api/v1/system/maintenance", nil, 200, &st)
	if !st.MaintenanceMode {
		t.Fatal("after switching it on in the page, the broker reports push maintenance off")
	}
	p.run(chromedp.WaitVisible(`#switch-push[aria-pressed="true"]`, chromedp.ByQuery))
	p.shot("maintenance")
	p.confirm("#switch-push", "drains its spool")
	p.toast("Maintenance mode DISABLED")
	c.JSON("GET", "/api/v1/system/maintenance", nil, 200, &st)
	if st.MaintenanceMode {
		t.Fatal("after switching it off in the page, the broker reports push maintenance on")
	}
	p.clean("maintenance")
}

// With JWT on, the page asks for a token, shows who is signed in with which levels, and a
// read-only token sees the maintenance switches disabled; the broker refuses the call anyway.
func TestReadOnlyTokenSeesSwitchesDisabled(t *testing.T) {
	const secret = "dashboard-test-secret-0123456789abcdef"
	c := servertest.Start(t, pgtest.NewDatabase(t), func(cfg *config.Config) {
		cfg.JWT = auth.Defaults()
		cfg.JWT.Secret = secret
	})
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "viewer-1", "role": "read-only", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	p := open(t, c.Base)
	p.run(chromedp.Navigate(c.Base+"/#/maintenance"), chromedp.WaitVisible("#token", chromedp.ByQuery))
	p.shot("sign-in")
	p.mu.Lock()
	p.errs = nil // /auth/me answers 401 before a token is given: that is how the page knows
	p.mu.Unlock()
	p.run(chromedp.SendKeys("#token", tok, chromedp.ByQuery), chromedp.Click(".signin button[type=submit]", chromedp.ByQuery),
		chromedp.WaitVisible("#switch-push", chromedp.ByQuery))
	var who, levels string
	var disabled []bool
	p.run(chromedp.Text("#who", &who, chromedp.ByQuery), chromedp.Text("#levels", &levels, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('#switch-push, #switch-pop')].map(b => b.disabled)`, &disabled))
	if !strings.Contains(who, "viewer-1") || strings.TrimSpace(strings.Trim(levels, " ·")) != "read-only" {
		t.Errorf("identity shows %q %q, want viewer-1 with read-only", who, levels)
	}
	if len(disabled) != 2 || !disabled[0] || !disabled[1] {
		t.Errorf("maintenance switches disabled = %v, want both disabled for a read-only token", disabled)
	}
	p.waitText("Records waiting") // the spool is read-only: shown
	p.clean("maintenance, read-only")

	status, body := c.WithHeader("Authorization", "Bearer "+tok).Do("POST", "/api/v1/system/maintenance", map[string]any{"enabled": true})
	if status != 403 {
		t.Fatalf("a read-only token switching maintenance: %d %s, want 403", status, body)
	}
}
