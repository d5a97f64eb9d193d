//go:build linux && (amd64 || arm64)

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"queen/testkit"
)

// TestIdleConnectionFloodKeepsServing runs the broker binary with a descriptor limit of 256 and
// opens 3,000 idle TCP connections to its port, far more than the limit. The broker must stay up:
// it serves as many connections as its cap allows (derived from the limit and logged at boot),
// answers the others 503 and closes them, sheds a connection that sends no request, and once
// the flood is gone answers /health and a push and pop round trip. Meanwhile a push with a
// 60 MiB body, whose second half is sent only after the header timeout has dropped an idle
// connection opened later, must be accepted: the body is not bound by the header timeout.
func TestIdleConnectionFloodKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("the flood test builds the broker and runs PostgreSQL")
	}
	const nofile, flood = 256, 3000
	raiseNofile(t, flood+256)
	r := newBrokerRig(t, "queen-fds-")
	b := startCrashBroker(t, r.env, r.base, "/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0"`, nofile), r.bin)
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", b.cmd.Process.Pid))
	if err != nil || !regexp.MustCompile(fmt.Sprintf(`Max open files\s+%d\s+%d`, nofile, nofile)).Match(limits) {
		t.Fatalf("the broker does not run with a descriptor limit of %d (%v):\n%s", nofile, err, limits)
	}

	addr := strings.TrimPrefix(r.base, "http://")
	big := strings.Repeat("x", 60<<20)
	body, err := json.Marshal(map[string]any{"items": []map[string]any{
		{"queue": "flood", "transactionId": "flood-big", "payload": map[string]any{"text": big}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	half := len(body) / 2
	if _, err := fmt.Fprintf(slow, "POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(body), body[:half]); err != nil {
		t.Fatalf("the first half of the large push: %v", err)
	}

	conns := make([]net.Conn, 0, flood)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	defer closeAll()
	for len(conns) < flood {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d of %d: %v; %s", len(conns)+1, flood, err, b.gone())
		}
		conns = append(conns, c)
	}
	// The broker accepts in order, so once the last connection has its answer every other one
	// has been accepted. It is over the cap: 503, then closed.
	if reply := readToEOF(conns[len(conns)-1]); !strings.HasPrefix(reply, "HTTP/1.1 503") {
		t.Fatalf("the last of %d idle connections got %q, want a 503; %s", flood, reply, b.gone())
	}
	// The first was served, and is dropped for sending no request in time.
	if reply := readToEOF(conns[0]); !strings.HasPrefix(reply, "HTTP/1.1 408") {
		t.Fatalf("the first idle connection got %q, want a 408 and the connection closed; %s", reply, b.gone())
	}
	select {
	case err := <-b.exited:
		b.exited <- err
		t.Fatalf("the broker exited during the flood; %s", b.gone())
	default:
	}
	closeAll()

	// The large push's headers were sent before that connection opened: the rest of its body
	// arrives after their header timeout too.
	if _, err := slow.Write(body[half:]); err != nil {
		t.Fatalf("the second half of the large push: %v; %s", err, b.gone())
	}
	_ = slow.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("the large push: %v; %s", err, b.gone())
	}
	reply, _ := io.ReadAll(resp.Body)
	if !accepted(resp.StatusCode) {
		t.Fatalf("the large push: %d %s", resp.StatusCode, reply)
	}

	m := regexp.MustCompile(`max_connections=(\d+)`).FindStringSubmatch(b.stderr.String())
	if m == nil {
		t.Fatalf("the broker did not log its connection cap:\n%s", b.stderr.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 || n >= nofile {
		t.Errorf("connection cap %d with a descriptor limit of %d", n, nofile)
	} else {
		t.Logf("connection cap %d under a descriptor limit of %d", n, nofile)
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	var (
		status int
		health []byte
	)
	if !testkit.Eventually(30*time.Second, func() bool { // the broker notices the closed connections
		status, health, err = crashDo(hc, "GET", r.base+"/health", nil)
		return err == nil && status == 200
	}) {
		t.Fatalf("/health after the flood: %d %s %v; %s", status, health, err, b.gone())
	}
	const text = "after the flood ☃"
	status, reply, err = crashDo(hc, "POST", r.base+"/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": "flood", "transactionId": "flood-1", "payload": map[string]any{"text": text}},
	}})
	if err != nil || !accepted(status) {
		t.Fatalf("push after the flood: %d %s %v", status, reply, err)
	}
	// A push spooled (201) reaches the queue when the spool drains: long-poll until both are in,
	// in push order.
	type poppedMessage struct {
		TransactionID string `json:"transactionId"`
		Data          struct {
			Text string `json:"text"`
		} `json:"data"`
	}
	var got []poppedMessage
	pc := &http.Client{Timeout: time.Minute}
	popBy := time.Now().Add(2 * time.Minute)
	for len(got) < 2 && time.Now().Before(popBy) {
		var popped struct{ Messages []poppedMessage }
		crashJSON(t, pc, "GET", r.base+"/api/v1/pop/queue/flood?batch=10&autoAck=true&wait=true&timeout=5000", nil, 200, &popped)
		got = append(got, popped.Messages...)
	}
	if len(got) != 2 || got[0].TransactionID != "flood-big" || got[0].Data.Text != big ||
		got[1].TransactionID != "flood-1" || got[1].Data.Text != text {
		for _, m := range got {
			t.Logf("popped %s: %d bytes of text", m.TransactionID, len(m.Data.Text))
		}
		t.Fatalf("popped %d messages, want flood-big with its 60 MiB text, then flood-1 with %q", len(got), text)
	}

	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-b.exited; err != nil {
		t.Errorf("the broker exited with %v after SIGTERM:\n%s", err, b.stderr.String())
	}
}

// TestListenerFailureExitsNonZero shuts the broker's HTTP listening socket down from outside (a
// duplicate taken with pidfd_getfd, then shutdown(2)), so accept fails with EINVAL, which no
// retry can cure. The broker must stop, with its PostgreSQL, exit code 1 and a last line naming
// the listener.
func TestListenerFailureExitsNonZero(t *testing.T) {
	if testing.Short() {
		t.Skip("the listener failure test builds the broker and runs PostgreSQL")
	}
	r := newBrokerRig(t, "queen-lnfail-")
	b := startCrashBroker(t, r.env, r.base, r.bin)
	shutdownListeningSocket(t, b.cmd.Process.Pid, r.port)
	select {
	case err := <-b.exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("exit: %v, want exit code 1; log:\n%s", err, b.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the broker still runs a minute after its listener failed:\n%s", b.stderr.String())
	}
	last := lastLine(b.stderr.String())
	if !strings.HasPrefix(last, "queen: ") || !strings.Contains(last, "HTTP listener") || !strings.Contains(last, strconv.Itoa(r.port)) {
		t.Errorf("last line %q, want \"queen: ...\" naming the HTTP listener and its port", last)
	}
	if pids := postmasterPIDs(r.pgdata); len(pids) > 0 {
		t.Errorf("PostgreSQL still running after the broker exited: %v", pids)
	}
}

// raiseNofile makes sure this process may hold need descriptors.
func raiseNofile(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Skipf("the hard descriptor limit %d is below the %d this test needs", lim.Max, need)
	}
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
}

// accepted is the status of a push that was stored (200) or spooled (201).
func accepted(status int) bool { return status == 200 || status == 201 }

// readToEOF reads what the broker sends on c until it closes the connection (a minute at most).
func readToEOF(c net.Conn) string {
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	b, err := io.ReadAll(c)
	if err != nil {
		return fmt.Sprintf("%s (%v)", b, err)
	}
	return string(b)
}

// gone describes the broker for a failure message: its exit status once it has exited, and its
// log.
func (b *crashBroker) gone() string {
	select {
	case err := <-b.exited:
		b.exited <- err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Sprintf("the broker exited (%v); its log:\n%s", err, b.stderr.String())
	case <-time.After(10 * time.Second):
		return "the broker still runs; its log:\n" + b.stderr.String()
	}
}

// The system call numbers of pidfd_open and pidfd_getfd on amd64 and arm64 (this file's build
// constraint); the syscall package does not name them.
const sysPidfdOpen, sysPidfdGetfd = 434, 438

// shutdownListeningSocket finds the socket process pid listens on port with, and shuts it down
// through a duplicate, as a failing network stack would leave it.
func shutdownListeningSocket(t *testing.T, pid, port int) {
	t.Helper()
	pidfd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		t.Fatalf("pidfd_open: %v", errno)
	}
	defer syscall.Close(int(pidfd))
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(target, "socket:") {
			continue
		}
		n, _ := strconv.Atoi(e.Name())
		dup, _, errno := syscall.Syscall(sysPidfdGetfd, pidfd, uintptr(n), 0)
		if errno != 0 {
			t.Fatalf("pidfd_getfd %d: %v", n, errno)
		}
		fd := int(dup)
		listening, _ := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
		sa, _ := syscall.Getsockname(fd)
		if in, ok := sa.(*syscall.SockaddrInet4); ok && listening == 1 && in.Port == port {
			err := syscall.Shutdown(fd, syscall.SHUT_RD)
			syscall.Close(fd)
			if err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			return
		}
		syscall.Close(fd)
	}
	t.Fatalf("process %d has no socket listening on port %d", pid, port)
}
