package main

import (
	"context"
	"errors"
	"io"
)

// runServe runs the proxy until ctx ends. The serving side replaces this file.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return errors.New("not built yet")
}
