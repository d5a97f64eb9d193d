package main

import (
	"strings"
	"testing"
)

// A bad configuration stops the boot before anything starts, naming the variable.
func TestBootRefusesBadConfiguration(t *testing.T) {
	for name, value := range map[string]string{"PORT": "http", "JWT_ENABLED": "yes", "DB_POOL_SIZE": "0"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			err := run()
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%s: got %v, want an error naming %s", name, value, err, name)
			}
		})
	}
}
