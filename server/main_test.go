package server_test

import (
	"testing"

	"queen/pg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
