package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"queen/proxy/pxdb"
)

func cellsAdd(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("cells add", flag.ContinueOnError)
	upstream := fs.String("upstream", "", "the cell's broker URL, http(s)://host:port, or several separated by commas")
	token := fs.String("broker-token", "", "the JWT the proxy presents to the cell's brokers")
	tenant := fs.String("tenant", "", "the tenant id the proxy sets in x-queen-tenant")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := required("upstream", *upstream); err != nil {
		return err
	}
	s, err := openStore(ctx, e)
	if err != nil {
		return err
	}
	defer s.Close()
	c := pxdb.Cell{Name: pos[0], Upstream: *upstream, BrokerToken: *token, Tenant: *tenant}
	if err := s.AddCell(ctx, c, actor(e.getenv)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "added cell %s -> %s\n", c.Name, c.Upstream)
	return nil
}

func usersAdd(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("users add", flag.ContinueOnError)
	cell := fs.String("cell", "", "the cell the user works on")
	role := fs.String("role", "", "reader, writer or operator")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if err := errors.Join(required("cell", *cell), required("role", *role)); err != nil {
		return badArgs{err}
	}
	// On standard input so that it shows neither in the process list nor in shell history.
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("cannot read the password from standard input: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return badArgsf("no password on standard input (one line)")
	}
	s, err := openStore(ctx, e)
	if err != nil {
		return err
	}
	defer s.Close()
	u := pxdb.User{Name: pos[0], Cell: *cell, Role: *role}
	if err := s.AddUser(ctx, u, password, actor(e.getenv)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "added user %s on cell %s with role %s\n", u.Name, u.Cell, u.Role)
	return nil
}

// usersDisabler is the command that disables a user (ending its sessions) or enables it again.
func usersDisabler(disable bool) func(ctx context.Context, e env, args []string) error {
	name := map[bool]string{true: "users disable", false: "users enable"}[disable]
	return func(ctx context.Context, e env, args []string) error {
		pos, err := parseArgs(flag.NewFlagSet(name, flag.ContinueOnError), args, 1)
		if err != nil {
			return err
		}
		s, err := openStore(ctx, e)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.SetUserDisabled(ctx, pos[0], disable, actor(e.getenv)); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%sd user %s\n", strings.TrimPrefix(name, "users "), pos[0])
		return nil
	}
}

func keysCreate(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	cell := fs.String("cell", "", "the cell the key reaches")
	classList := fs.String("classes", "", "comma-separated: produce, consume, queue_admin, read, operator")
	expiresIn := fs.String("expires", "90d", "lifetime: Nd, Nh or a Go duration")
	if _, err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if err := errors.Join(required("cell", *cell), required("classes", *classList)); err != nil {
		return badArgs{err}
	}
	lifetime, err := parseLifetime(*expiresIn)
	if err != nil {
		return err
	}
	var classes []string
	for _, c := range strings.Split(*classList, ",") {
		if c = strings.TrimSpace(c); c != "" {
			classes = append(classes, c)
		}
	}
	s, err := openStore(ctx, e)
	if err != nil {
		return err
	}
	defer s.Close()
	k, secret, err := s.CreateKey(ctx, *cell, classes, time.Now().Add(lifetime), actor(e.getenv))
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "created key %s for cell %s, classes %s, expires %s\n",
		k.ID, k.Cell, strings.Join(k.Classes, ","), k.ExpiresAt.Format(time.RFC3339))
	fmt.Fprintln(e.stdout, "the key is shown this once; keep it as a secret:")
	fmt.Fprintln(e.stdout, secret) // alone on the last line, for scripts
	return nil
}

// parseLifetime reads Nd (days), or a Go duration such as 12h or 90m; it must be positive.
func parseLifetime(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
		if n > 100*365 {
			err = errors.New("more than a century")
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, badArgsf("--expires %q must be a positive Nd, Nh or Go duration", s)
	}
	return d, nil
}

func keysRevoke(ctx context.Context, e env, args []string) error {
	pos, err := parseArgs(flag.NewFlagSet("keys revoke", flag.ContinueOnError), args, 1)
	if err != nil {
		return err
	}
	id, err := uuid.Parse(pos[0])
	if err != nil {
		return badArgsf("key id %q is not a UUID", pos[0])
	}
	s, err := openStore(ctx, e)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.RevokeKey(ctx, id, actor(e.getenv)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "revoked key %s\n", id)
	return nil
}

func keysList(ctx context.Context, e env, args []string) error {
	if _, err := parseArgs(flag.NewFlagSet("keys list", flag.ContinueOnError), args, 0); err != nil {
		return err
	}
	s, err := openStore(ctx, e)
	if err != nil {
		return err
	}
	defer s.Close()
	keys, err := s.Keys(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCELL\tCLASSES\tHINT\tCREATED\tEXPIRES\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Cell, strings.Join(k.Classes, ","), k.Hint,
			k.CreatedAt.Format(time.RFC3339), k.ExpiresAt.Format(time.RFC3339), revoked)
	}
	return w.Flush()
}
