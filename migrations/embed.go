// Package migrations holds the numbered SQL files that create and upgrade the
// broker's schema. They are embedded in the binary and applied at boot by
// persistence.Store.Migrate, in file-name order, each exactly once.
package migrations

import "embed"

// Files holds every NNNN_name.sql file of this directory.
//
//go:embed *.sql
var Files embed.FS
