package localpg

import (
	"context"
	"fmt"
	"strconv"
)

// basebackup makes the new data directory a copy of the running primary with pg_basebackup -R,
// which also writes where the primary is (primary_conninfo) and standby.signal: the server then
// starts as a hot standby streaming from it. The copy connects over the primary's unix socket,
// which initdb's pg_hba.conf trusts for replication. The primary's settings come along (its
// queen.conf is rewritten with this cluster's own at start), so synchronous_standby_names given
// to the primary does not make the standby wait for a standby of its own.
func (c *Cluster) basebackup(ctx context.Context) error {
	out, err := c.run(ctx, "pg_basebackup", "-D", c.pgdata, "-h", c.primary.runDir, "-p", strconv.Itoa(c.primary.port),
		"-U", "postgres", "-R", "-X", "stream", "-c", "fast")
	if err != nil {
		return fmt.Errorf("cannot copy the primary %s into %s with pg_basebackup: %w: %s", c.primary.pgdata, c.pgdata, err, tail(out))
	}
	return nil
}

// Promote ends a standby's recovery: it returns once the server accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := c.run(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", c.pgdata)
	if err != nil {
		return fmt.Errorf("cannot promote the standby in %s: %w: %s", c.pgdata, err, tail(out))
	}
	return nil
}
