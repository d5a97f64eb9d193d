package pxdb_test

import (
	"errors"
	"testing"

	"queen/proxy/pxdb"
)

// A cell comes back as added, its upstream reduced to scheme://host[:port]; a second cell of the
// same name is ErrExists.
func TestCellsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	want := []pxdb.Cell{
		{Name: "eu-1", Upstream: "https://eu1.internal:6632", BrokerToken: "eyJhbGciOi.x.y", Tenant: "acme.prod"},
		{Name: "two", Upstream: "http://10.0.0.3:6632,http://10.0.0.4:6632"},
		{Name: "us1", Upstream: "http://10.0.0.1:6632"},
	}
	for _, c := range []pxdb.Cell{
		{Name: "us1", Upstream: "http://10.0.0.1:6632/"},
		{Name: "two", Upstream: "http://10.0.0.3:6632/, http://10.0.0.4:6632"},
		{Name: "eu-1", Upstream: "https://eu1.internal:6632", BrokerToken: "eyJhbGciOi.x.y", Tenant: "acme.prod"},
	} {
		if err := s.AddCell(ctx, c, admin); err != nil {
			t.Fatalf("AddCell %s: %v", c.Name, err)
		}
	}
	got, err := s.Cells(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("Cells = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].CreatedAt.IsZero() {
			t.Errorf("cell %s: no creation time", got[i].Name)
		}
		got[i].CreatedAt = want[i].CreatedAt
		if got[i] != want[i] {
			t.Errorf("cell %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	err = s.AddCell(ctx, pxdb.Cell{Name: "us1", Upstream: "http://10.0.0.2:6632"}, admin)
	if !errors.Is(err, pxdb.ErrExists) {
		t.Fatalf("second cell us1: %v, want ErrExists", err)
	}
	if got, _ := s.Cells(ctx); len(got) != 3 || got[2].Upstream != "http://10.0.0.1:6632" {
		t.Fatalf("the refused duplicate changed the cells: %+v", got)
	}
}

// Each malformed field is refused with ErrInvalid, before anything is stored.
func TestAddCellRefusesMalformed(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	ok := pxdb.Cell{Name: "c1", Upstream: "http://broker:6632"}
	long := "a"
	for len(long) < 64 {
		long += "a"
	}
	for name, mutate := range map[string]func(*pxdb.Cell){
		"empty name":           func(c *pxdb.Cell) { c.Name = "" },
		"upper-case name":      func(c *pxdb.Cell) { c.Name = "Eu1" },
		"name ends with dash":  func(c *pxdb.Cell) { c.Name = "eu1-" },
		"name of 64":           func(c *pxdb.Cell) { c.Name = long },
		"name with dot":        func(c *pxdb.Cell) { c.Name = "eu.1" },
		"relative upstream":    func(c *pxdb.Cell) { c.Upstream = "broker:6632" },
		"ftp upstream":         func(c *pxdb.Cell) { c.Upstream = "ftp://broker" },
		"no host":              func(c *pxdb.Cell) { c.Upstream = "http:///x" },
		"path":                 func(c *pxdb.Cell) { c.Upstream = "http://broker/api" },
		"query":                func(c *pxdb.Cell) { c.Upstream = "http://broker/?a=1" },
		"empty query":          func(c *pxdb.Cell) { c.Upstream = "http://broker?" },
		"fragment":             func(c *pxdb.Cell) { c.Upstream = "http://broker#x" },
		"user info":            func(c *pxdb.Cell) { c.Upstream = "http://u:p@broker" },
		"empty list entry":     func(c *pxdb.Cell) { c.Upstream = "http://a:1,,http://b:2" },
		"bad second broker":    func(c *pxdb.Cell) { c.Upstream = "http://a:1,b:2" },
		"tenant with space":    func(c *pxdb.Cell) { c.Tenant = "a b" },
		"tenant of 64":         func(c *pxdb.Cell) { c.Tenant = long },
		"tenant starts with .": func(c *pxdb.Cell) { c.Tenant = ".a" },
		"token with newline":   func(c *pxdb.Cell) { c.BrokerToken = "abc\r\nX-Evil: 1" },
	} {
		c := ok
		mutate(&c)
		if err := s.AddCell(ctx, c, admin); !errors.Is(err, pxdb.ErrInvalid) {
			t.Errorf("%s (%+v): %v, want ErrInvalid", name, c, err)
		}
	}
	if err := s.AddCell(ctx, ok, pxdb.Actor{}); !errors.Is(err, pxdb.ErrInvalid) {
		t.Errorf("no actor: %v, want ErrInvalid", err)
	}
	if got, err := s.Cells(ctx); err != nil || len(got) != 0 {
		t.Fatalf("cells after refusals: %+v, %v", got, err)
	}
}
