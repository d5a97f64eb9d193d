package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"queen/auth"
	"queen/config"
	"queen/pg/pgtest"
	"queen/proxy/proxytest"
	"queen/proxy/pxdb"
	"queen/server/servertest"
)

// A person signs in once, on queen-proxy's page, and gets the broker's dashboard through it:
// the session cookie carries every request the dashboard makes (a switch that changes the
// broker included), the proxy audits that change, and signing out leads back to the sign-in
// page.
func TestSignInThroughTheProxy(t *testing.T) {
	const secret = "dashboard-proxy-broker-secret-0123456789"
	broker := servertest.Start(t, pgtest.NewDatabase(t), func(c *config.Config) {
		c.JWT = auth.Defaults()
		c.JWT.Secret = secret
	})
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "queen-proxy", "role": "admin",
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	px := proxytest.Start(t, func(c *config.Proxy) { c.JWTSecret = "dashboard-proxy-session-secret-0123456789" })
	store, base := px.Store, px.Base
	cli := pxdb.Actor{Who: "cli:test", Credential: "cli"}
	if err := store.AddCell(context.Background(), pxdb.Cell{Name: "main", Upstream: broker.Base, BrokerToken: token}, cli); err != nil {
		t.Fatal(err)
	}
	if err := store.AddUser(context.Background(), pxdb.User{Name: "ada", Cell: "main", Role: "operator"}, "analytical engine", cli); err != nil {
		t.Fatal(err)
	}

	pg := open(t, base)
	pg.run(chromedp.Navigate(base+"/#/maintenance"), chromedp.WaitVisible(`input[name=username]`, chromedp.ByQuery))
	pg.run(chromedp.SendKeys(`input[name=username]`, "ada", chromedp.ByQuery),
		chromedp.SendKeys(`input[name=password]`, "analytical engine", chromedp.ByQuery),
		chromedp.Click(`button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible("#who", chromedp.ByQuery))
	pg.goTo("maintenance", "#switch-push")
	var who string
	pg.run(chromedp.Text("#who", &who, chromedp.ByQuery))
	if !strings.Contains(who, "ada") {
		t.Errorf("the dashboard shows %q, want ada signed in", who)
	}
	pg.waitText("Records waiting")
	pg.confirm("#switch-push", "Producers keep getting their pushes accepted")
	pg.toast("Maintenance mode ENABLED")
	var st maintenanceState
	broker.WithHeader("Authorization", "Bearer "+token).JSON("GET", "/api/v1/system/maintenance", nil, 200, &st)
	if !st.MaintenanceMode {
		t.Fatal("after switching it on through the proxy, the broker reports push maintenance off")
	}
	pg.clean("dashboard through the proxy")
	ops, err := store.Operations(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var audited bool
	for _, op := range ops {
		audited = audited || (op.Who == "ada" && op.Credential == "session" && op.Path == "/api/v1/system/maintenance" && op.Status == 200)
	}
	if !audited {
		t.Errorf("no audit row for ada's maintenance switch: %+v", ops)
	}

	// Signing out ends the session: the dashboard's next /auth/me is a 401 that sends it to
	// the sign-in page (the 401s on the way are how it learns; they are not errors here).
	pg.run(chromedp.Click("#identity button", chromedp.ByQuery), chromedp.WaitVisible(`input[name=username]`, chromedp.ByQuery))
	var url string
	pg.run(chromedp.Location(&url))
	if !strings.Contains(url, "/proxy/login") {
		t.Errorf("after signing out the browser is at %s, want the sign-in page", url)
	}
}
