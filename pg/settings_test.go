package pg

import (
	"crypto/tls"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"queen/testkit"
)

// The settings reach pgx as given, whatever characters they hold; every server of the list
// gets the TLS mode the settings amount to, checked under its own name.
func TestConnectionSettingsReachPgx(t *testing.T) {
	ca := testkit.NewCA(t).PEM
	for name, c := range map[string]struct {
		s          Settings
		tls        bool
		verified   bool
		customRoot bool
	}{
		"plaintext":  {},
		"system CA":  {s: Settings{UseSSL: true, RejectUnauthorized: true}, tls: true, verified: true},
		"given CA":   {s: Settings{UseSSL: true, RejectUnauthorized: true, RootCert: ca}, tls: true, verified: true, customRoot: true},
		"CA wins":    {s: Settings{UseSSL: true, RootCert: ca}, tls: true, verified: true, customRoot: true},
		"unverified": {s: Settings{UseSSL: true}, tls: true},
	} {
		s := c.s
		s.Servers = []Server{{Host: "db1.example", Port: 6543}, {Host: "db2.example", Port: 6544}}
		s.User, s.Password, s.DB, s.Prefix = "a b+c", `p&w=d +'\"%`, "proxy db", "PXDB_"
		tc, err := s.TLS(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pc, err := pgxpool.ParseConfig(s.ConnString())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cc := pc.ConnConfig
		if cc.Host != "db1.example" || cc.Port != 6543 || cc.User != s.User || cc.Password != s.Password ||
			cc.Database != s.DB || len(cc.Fallbacks) != 1 || cc.Fallbacks[0].Host != "db2.example" || cc.Fallbacks[0].Port != 6544 {
			t.Errorf("%s: parsed %s:%d (+%d) user %q password %q db %q", name, cc.Host, cc.Port, len(cc.Fallbacks), cc.User, cc.Password, cc.Database)
			continue
		}
		if (tc != nil) != c.tls {
			t.Errorf("%s: TLS %v, want %v", name, tc != nil, c.tls)
			continue
		}
		if tc == nil {
			continue
		}
		withTLS(&cc.Config, tc)
		for host, ht := range map[string]*tls.Config{cc.Host: cc.TLSConfig, cc.Fallbacks[0].Host: cc.Fallbacks[0].TLSConfig} {
			if verified := ht != nil && !ht.InsecureSkipVerify && ht.ServerName == host; verified != c.verified {
				t.Errorf("%s: %s verified %v, want %v", name, host, verified, c.verified)
			}
			if ht != nil && (ht.RootCAs != nil) != c.customRoot {
				t.Errorf("%s: %s own roots %v, want %v", name, host, ht.RootCAs != nil, c.customRoot)
			}
		}
	}
}
