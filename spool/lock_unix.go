//go:build unix

package spool

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on path, so that two Spools never share a directory: not two
// processes, and not two Opens in one process either (flock locks belong to the open file).
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("cannot create lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cannot lock %s (is another spool using the directory?): %w", path, err)
	}
	return f, nil
}
