package pxdb

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cell is a broker group with its own PostgreSQL that the proxy forwards to.
type Cell struct {
	Name string
	// Upstream is stored as scheme://host[:port], without a trailing slash, so a path appends.
	Upstream string
	// BrokerToken, when set, is the JWT the proxy presents to the cell's brokers.
	BrokerToken string
	// Tenant, when set, is what the proxy puts in x-queen-tenant.
	Tenant    string
	CreatedAt time.Time
}

var (
	cellName   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) // a DNS label
	tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
)

// AddCell adds a cell; ErrExists when one has that name. Audited.
func (s *Store) AddCell(ctx context.Context, c Cell, by Actor) error {
	if err := checkActor(by); err != nil {
		return err
	}
	if !cellName.MatchString(c.Name) {
		return invalid("cell name %q must be a DNS label: lower-case letters, digits and '-', at most 63, not starting or ending with '-'", c.Name)
	}
	upstream, err := normalUpstream(c.Upstream)
	if err != nil {
		return err
	}
	if c.Tenant != "" && !tenantName.MatchString(c.Tenant) {
		return invalid("tenant %q must be letters, digits, '_', '.' and '-', at most 63, starting with a letter or digit", c.Tenant)
	}
	// It goes into an Authorization header: a space or control character would split or end it.
	if strings.IndexFunc(c.BrokerToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return invalid("the broker token of cell %s holds a space or a control character", c.Name)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO queen_proxy.cells (name, upstream, broker_token, tenant) VALUES ($1, $2, $3, $4)
			ON CONFLICT (name) DO NOTHING`, c.Name, upstream, c.BrokerToken, c.Tenant)
		if err != nil {
			return fmt.Errorf("cannot add cell %s: %w", c.Name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("cell %s: %w", c.Name, ErrExists)
		}
		return audit(ctx, tx, by, "add_cell", "cell/"+c.Name, c.Name)
	})
}

// normalUpstream checks an upstream: one URL, or a comma-separated list of the cell's brokers,
// each an absolute http or https URL with a host and no path beyond "/", no query, fragment
// or user info. It returns the URLs as scheme://host[:port], joined by commas.
func normalUpstream(raw string) (string, error) {
	var out []string
	for _, one := range strings.Split(raw, ",") {
		u, err := normalURL(strings.TrimSpace(one))
		if err != nil {
			return "", err
		}
		out = append(out, u)
	}
	return strings.Join(out, ","), nil
}

// UpstreamURLs are the brokers of a stored upstream.
func UpstreamURLs(upstream string) []string { return strings.Split(upstream, ",") }

func normalURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", invalid("upstream %q is not a URL: %v", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", invalid("upstream %q must be an http or https URL", raw)
	case u.Host == "" || u.Hostname() == "":
		return "", invalid("upstream %q has no host", raw)
	case u.Path != "" && u.Path != "/", u.RawPath != "":
		return "", invalid("upstream %q must have no path", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", invalid("upstream %q must have no query or fragment", raw)
	case u.User != nil:
		// It would be listed and logged with the cell; a broker credential is BrokerToken.
		return "", invalid("upstream %q must not carry user info", raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Cells lists the cells by name.
func (s *Store) Cells(ctx context.Context) ([]Cell, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT name, upstream, broker_token, tenant, created_at FROM queen_proxy.cells ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("cannot list the cells: %w", err)
	}
	cells, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Cell, error) {
		var c Cell
		err := row.Scan(&c.Name, &c.Upstream, &c.BrokerToken, &c.Tenant, &c.CreatedAt)
		c.CreatedAt = c.CreatedAt.UTC()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list the cells: %w", err)
	}
	return cells, nil
}
