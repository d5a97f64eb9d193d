package pxdb_test

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"queen/proxy/pxdb"
)

func TestUsersAndPasswords(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, cs := newStore(t)
	addCell(t, s, "eu1")
	const password = "correct horse battery"
	if err := s.AddUser(ctx, pxdb.User{Name: "bob@example.com", Cell: "eu1", Role: "writer"}, password, admin); err != nil {
		t.Fatal(err)
	}
	u, err := s.CheckPassword(ctx, "bob@example.com", password)
	if err != nil || u != (pxdb.User{Name: "bob@example.com", Cell: "eu1", Role: "writer"}) {
		t.Fatalf("CheckPassword(good) = %+v, %v", u, err)
	}
	for name, c := range map[string][2]string{
		"wrong password":       {"bob@example.com", password + "!"},
		"empty password":       {"bob@example.com", ""},
		"unknown user":         {"eve", password},
		"name of another case": {"Bob@example.com", password},
	} {
		if u, err := s.CheckPassword(ctx, c[0], c[1]); !errors.Is(err, pxdb.ErrBadCredentials) || u != (pxdb.User{}) {
			t.Errorf("%s: %+v, %v; want ErrBadCredentials and no user", name, u, err)
		}
	}

	// What is stored is an argon2id PHC string with its parameters, and not the password.
	dump := dumpSchema(t, cs)
	phc := regexp.MustCompile(`\$argon2id\$v=19\$m=65536,t=2,p=2\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}`)
	if !phc.MatchString(dump) {
		t.Fatalf("no argon2id PHC hash in the users table:\n%s", dump)
	}
	if strings.Contains(dump, password) {
		t.Fatalf("the database holds the password:\n%s", dump)
	}

	err = s.AddUser(ctx, pxdb.User{Name: "bob@example.com", Cell: "eu1", Role: "reader"}, password, admin)
	if !errors.Is(err, pxdb.ErrExists) {
		t.Fatalf("second bob: %v, want ErrExists", err)
	}
	if u, err := s.CheckPassword(ctx, "bob@example.com", password); err != nil || u.Role != "writer" {
		t.Fatalf("the refused duplicate changed bob: %+v, %v", u, err)
	}
}

func TestAddUserRefusals(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	addCell(t, s, "eu1")
	for name, c := range map[string]struct {
		user     pxdb.User
		password string
		want     error
	}{
		"unknown cell":    {pxdb.User{Name: "bob", Cell: "nope", Role: "reader"}, "twelve chars", pxdb.ErrNoCell},
		"short password":  {pxdb.User{Name: "bob", Cell: "eu1", Role: "reader"}, "eleven char", pxdb.ErrInvalid},
		"unknown role":    {pxdb.User{Name: "bob", Cell: "eu1", Role: "admin"}, "twelve chars", pxdb.ErrInvalid},
		"empty name":      {pxdb.User{Name: "", Cell: "eu1", Role: "reader"}, "twelve chars", pxdb.ErrInvalid},
		"name with space": {pxdb.User{Name: "b b", Cell: "eu1", Role: "reader"}, "twelve chars", pxdb.ErrInvalid},
	} {
		if err := s.AddUser(ctx, c.user, c.password, admin); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := s.CheckPassword(ctx, "bob", "twelve chars"); !errors.Is(err, pxdb.ErrBadCredentials) {
		t.Fatalf("a refused user exists: %v", err)
	}
}

func TestRoleClasses(t *testing.T) {
	t.Parallel()
	for role, want := range map[string][]string{
		"reader":   {"read"},
		"writer":   {"produce", "consume", "read"},
		"operator": {"produce", "consume", "queue_admin", "read", "operator"},
	} {
		got, ok := pxdb.RoleClasses(role)
		if !ok || !slices.Equal(got, want) {
			t.Errorf("RoleClasses(%s) = %v, %v; want %v", role, got, ok, want)
		}
		got[0] = "blocked" // the caller's copy
	}
	if got, _ := pxdb.RoleClasses("reader"); got[0] != "read" {
		t.Fatal("a caller changed the classes of role reader")
	}
	if got, ok := pxdb.RoleClasses("admin"); ok || got != nil {
		t.Fatalf("RoleClasses(admin) = %v, %v; want none", got, ok)
	}
}
