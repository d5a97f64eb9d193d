package fusion_test

import (
	"testing"

	"queen/pg/pgtest"
)

// The lanes are tested against the real push: PostgreSQL says which item each result names.
func TestMain(m *testing.M) { pgtest.Main(m) }
