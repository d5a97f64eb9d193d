//go:build !unix

package spool

import (
	"fmt"
	"os"
)

// lockDir only creates the lock file: there is no flock here.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("cannot create lock file: %w", err)
	}
	return f, nil
}
