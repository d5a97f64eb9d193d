package persistence_test

import (
	"testing"

	"queen/persistence/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
