package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is a process the bench started, a broker or a proxy: done is closed once it has
// exited, and err is then its exit status.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// childSpec says how to start a child and when it is ready.
type childSpec struct {
	name              string // for errors: "the broker", "proxy1"
	bin, dir, logPath string
	env               []string
	deathSig          syscall.Signal // what it gets if the bench dies without stopping it
	started           func(*child)   // called once it runs, before it is ready
	ready             func() bool
	within            time.Duration // how long it may take to be ready
}

// startChild starts s.bin with its output appended to s.logPath, in a process group of its
// own (a ^C at the terminal reaches only the bench, which then stops it in order), and waits
// until s.ready reports true. A child that exits during startup is reported with the tail of
// its log; one still running when ctx ends or s.within passes is left to the caller, who had it
// from s.started, to stop.
func startChild(ctx context.Context, s childSpec) error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open the log of %s: %w", s.name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(s.bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, s.env, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: s.deathSig}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", s.name, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	s.started(c)
	deadline := time.Now().Add(s.within)
	for !s.ready() {
		select {
		case <-c.done:
			return fmt.Errorf("%s exited during startup (%v): %s", s.name, c.err, tailFile(s.logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within %s: %s", s.name, s.within, tailFile(s.logPath))
		}
	}
	return nil
}
