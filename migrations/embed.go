// Package migrations holds the numbered SQL files that create and upgrade the broker's schema.
// They are embedded in the binary and applied at boot (persistence.Store.Migrate), in file-name
// order, each exactly once.
package migrations

import (
	"embed"

	"queen/pg"
)

// Files holds every NNNN_name.sql file of this directory.
//
//go:embed *.sql
var Files embed.FS

// Set is the broker's migrations, recorded in queen.schema_migrations. Its advisory lock
// serialises brokers booting at once: the first applies what is pending, the others wait and
// then find nothing left to do.
var Set = pg.MigrationSet{Files: Files, Schema: "queen", LockKey: 0x717565656e4d4947} // "queenMIG"
