package localpg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The failures tests put a broker through: a server that hangs (Freeze, Thaw) and one whose
// machine is gone (Kill).

// Freeze stops every process of the server (SIGSTOP): it hangs instead of refusing, as it does
// behind a network partition or a stalled disk. Thaw resumes it.
func (c *Cluster) Freeze() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids, err := c.stopProcesses()
	c.frozen = append(c.frozen, pids...)
	return err
}

// Thaw resumes the processes Freeze stopped, the postmaster last.
func (c *Cluster) Thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pid := range slices.Backward(c.frozen) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	c.frozen = nil
}

// Kill ends the server as the loss of its machine would: every process of it gets SIGKILL, so
// there is no shutdown checkpoint and no goodbye to its clients or standbys. It returns once
// the postmaster is gone; the cluster then counts as stopped, and Start on its data directory
// runs crash recovery.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	pids, err := c.stopProcesses()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil {
		return err
	}
	if err := waitExited(pids[0], time.Minute); err != nil {
		return err
	}
	c.frozen = nil
	c.stopped = true
	c.unlock()
	return nil
}

// stopProcesses sends SIGSTOP to the postmaster, so that it starts no new process, then to each
// of its children, and returns them all, postmaster first. It finds the children by their
// parent in /proc, which only works while the postmaster lives.
func (c *Cluster) stopProcesses() ([]int, error) { return stopServer(c.pgdata) }

// KillServer sends SIGKILL to the server running in the data directory pgdata and to every
// process of it, and returns once the postmaster is gone: the loss of its machine, for a server
// another program started (Patroni). A directory without a live postmaster is left alone.
func KillServer(pgdata string) error {
	pids, err := stopServer(pgdata)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil {
		return err
	}
	return waitExited(pids[0], time.Minute)
}

// stopServer is stopProcesses for the server of data directory pgdata.
func stopServer(pgdata string) ([]int, error) {
	pidFile, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return nil, fmt.Errorf("cannot find the postmaster of %s: %w", pgdata, err)
	}
	line, _, _ := strings.Cut(string(pidFile), "\n")
	postmaster, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return nil, fmt.Errorf("cannot read the postmaster's pid in %s: %q", pgdata, line)
	}
	if err := syscall.Kill(postmaster, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("cannot stop the postmaster %d: %w", postmaster, err)
	}
	pids := []int{postmaster}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.ppid == postmaster && syscall.Kill(pid, syscall.SIGSTOP) == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

type procState struct {
	state byte
	ppid  int
}

// procStat reads the state and parent of a process from /proc/<pid>/stat.
func procStat(pid int) (procState, bool) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procState{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return procState{}, false
	}
	fields := strings.Fields(string(stat)[i+1:])
	if len(fields) < 2 {
		return procState{}, false
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil || len(fields[0]) != 1 {
		return procState{}, false
	}
	return procState{state: fields[0][0], ppid: ppid}, true
}

// waitExited waits until process pid has exited. A zombie counts as gone: the postmaster is not
// our child, and its new parent may be slow to reap it, or never do.
func waitExited(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, ok := procStat(pid)
		if !ok || st.state == 'Z' || st.state == 'X' {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the postmaster " + strconv.Itoa(pid) + " is still running after SIGKILL")
		}
		<-tick.C
	}
}
