package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"queen/testkit"
)

// crashBroker is the broker binary running as a subprocess.
type crashBroker struct {
	cmd    *exec.Cmd
	stderr *testkit.LogBuffer
	exited chan error
}

// startCrashBroker runs argv (the broker binary, or a command that execs it) with env and waits
// until it logs that it listens. The broker logs that line once its boot is done and its port
// open, and its log is one ordered stream: every boot line is in stderr by then, for the tests
// that read them (a dial that connects says nothing of the log lines still in the pipe).
func startCrashBroker(t *testing.T, env []string, base string, argv ...string) *crashBroker {
	t.Helper()
	b := &crashBroker{stderr: &testkit.LogBuffer{}, exited: make(chan error, 1)}
	b.cmd = exec.Command(argv[0], argv[1:]...)
	b.cmd.Env = env
	b.cmd.Stdout = b.stderr
	b.cmd.Stderr = b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("cannot start the broker: %v", err)
	}
	go func() { b.exited <- b.cmd.Wait() }()
	t.Cleanup(func() { // a failed test must not leave the broker behind
		if b.cmd.ProcessState == nil {
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	})
	listening := testkit.Eventually(3*time.Minute, func() bool { // the first start runs initdb
		select {
		case err := <-b.exited:
			b.exited <- err
			t.Fatalf("the broker exited during boot: %v\n%s", err, b.stderr.String())
		default:
		}
		return strings.Contains(b.stderr.String(), `msg="http listening" addr=`+strings.TrimPrefix(base, "http://"))
	})
	if !listening {
		t.Fatalf("the broker did not listen on %s in time:\n%s", base, b.stderr.String())
	}
	return b
}

// crashDo sends a request; errors are returned, not fatal, so a goroutine can use it.
func crashDo(hc *http.Client, method, url string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func crashJSON(t *testing.T, hc *http.Client, method, url string, body any, want int, out any) {
	t.Helper()
	status, raw, err := crashDo(hc, method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, status, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: cannot decode %s: %v", method, url, raw, err)
		}
	}
}

// postmasterPIDs lists the live processes whose command line names pgdata (the postmaster is
// started with -D pgdata).
func postmasterPIDs(pgdata string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})), pgdata) {
			out = append(out, pid)
		}
	}
	return out
}

// brokerRig is the broker binary built from this package, a directory of its own (the broker
// runs its own PostgreSQL under it) and a free loopback port.
type brokerRig struct {
	tmp, bin, pgdata, base string
	port                   int
	// env is this process's environment without its broker variables, plus the data
	// directory, the port and the loopback bind address.
	env []string
}

// newBrokerRig builds the broker; cleanup stops any PostgreSQL left running and removes the
// directory.
func newBrokerRig(t *testing.T, prefix string) *brokerRig {
	t.Helper()
	tmp, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	// When we are root, PostgreSQL runs as another user, who must be able to enter it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(tmp, "data")
	r := &brokerRig{tmp: tmp, bin: filepath.Join(tmp, "queen"), pgdata: filepath.Join(dataDir, "pgdata")}
	t.Cleanup(func() {
		// Should the test fail before the broker stopped, stop what PostgreSQL was left
		// (SIGINT is its fast shutdown), then remove everything.
		for _, pid := range postmasterPIDs(r.pgdata) {
			_ = syscall.Kill(pid, syscall.SIGINT)
		}
		testkit.Eventually(30*time.Second, func() bool { return len(postmasterPIDs(r.pgdata)) == 0 })
		os.RemoveAll(tmp)
	})

	build := exec.Command("go", "build", "-o", r.bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r.port, r.base = freePort(t)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || strings.HasPrefix(name, "QUEEN_") || strings.HasPrefix(name, "FILE_BUFFER_") ||
			name == "PORT" || name == "HOST" || name == "LOG_LEVEL" || name == "JWT_ENABLED" {
			continue
		}
		r.env = append(r.env, kv)
	}
	r.env = append(r.env, "QUEEN_DATA_DIR="+dataDir, "PORT="+strconv.Itoa(r.port), "QUEEN_BIND_ADDR=127.0.0.1", "LOG_LEVEL=info")
	return r
}

// freePort is a loopback port nothing listens on, and its base URL.
func freePort(t *testing.T) (int, string) {
	t.Helper()
	addr := closedPort(t)
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	return port, "http://" + addr
}

// TestCrashSpoolSurvivesSIGKILL runs the broker binary with its own PostgreSQL, turns push
// maintenance on and kills the broker with SIGKILL while pushes are being spooled. A torn record
// is then appended to the spool's active segment, as a write cut short by the crash would leave
// it. The restarted broker (which takes over the PostgreSQL server left running) comes back in
// maintenance, logs the torn tail it dropped, and once maintenance is off delivers every push
// that was answered buffered before the kill exactly once, in order per partition.
func TestCrashSpoolSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash test builds the broker and runs PostgreSQL")
	}
	r := newBrokerRig(t, "queen-crash-")
	spoolDir := filepath.Join(r.tmp, "spool")
	env := append(slices.Clip(r.env), "FILE_BUFFER_DIR="+spoolDir, "FILE_BUFFER_FLUSH_MS=20", "FILE_BUFFER_MAX_BATCH=20", "QUEEN_SERVER_ID=crash-test")
	base, pgdata := r.base, r.pgdata

	hc := &http.Client{Timeout: 30 * time.Second}
	first := startCrashBroker(t, env, base, r.bin)
	crashJSON(t, hc, "POST", base+"/api/v1/system/maintenance", map[string]any{"enabled": true}, 200, nil)

	// Push in a loop until the broker dies; remember what was answered buffered.
	const queue = "crash"
	parts := []string{"p0", "p1"}
	var (
		mu       sync.Mutex
		buffered = map[int]bool{} // message numbers answered buffered
		sent     = map[int]bool{} // message numbers sent, answered or not
		odd      []string
	)
	const enough = 2000 // pushes answered buffered before the kill
	pusherDone, reached := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pusherDone)
		const perPush = 10
		for n := 0; ; n += perPush {
			items := []map[string]any{}
			for k := n; k < n+perPush; k++ {
				items = append(items, map[string]any{
					"queue": queue, "partition": parts[(k/perPush)%len(parts)], "transactionId": fmt.Sprintf("crash-%d", k),
					"payload": map[string]any{"n": k, "text": "payload ☃ " + strconv.Itoa(k)},
				})
			}
			mu.Lock()
			for k := n; k < n+perPush; k++ {
				sent[k] = true
			}
			mu.Unlock()
			status, raw, err := crashDo(hc, "POST", base+"/api/v1/push", map[string]any{"items": items})
			if err != nil {
				return // the broker is gone
			}
			var res []struct {
				Status string `json:"status"`
			}
			ok := status == 201 && json.Unmarshal(raw, &res) == nil && len(res) == perPush
			for _, r := range res {
				ok = ok && r.Status == "buffered"
			}
			mu.Lock()
			if !ok {
				odd = append(odd, fmt.Sprintf("push %d: %d %s", n, status, raw))
			} else {
				before := len(buffered)
				for k := n; k < n+perPush; k++ {
					buffered[k] = true
				}
				if before < enough && len(buffered) >= enough {
					close(reached)
				}
			}
			mu.Unlock()
		}
	}()
	select {
	case <-reached:
	case <-time.After(time.Minute):
		mu.Lock()
		n := len(buffered)
		mu.Unlock()
		t.Fatalf("only %d pushes answered buffered in a minute; broker log:\n%s", n, first.stderr.String())
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	<-pusherDone
	mu.Lock()
	answered := slices.Sorted(maps.Keys(buffered))
	mu.Unlock()
	if len(odd) > 0 {
		t.Errorf("pushes under maintenance not answered 201 buffered: %q", odd)
	}
	leftover := postmasterPIDs(pgdata)
	t.Logf("PostgreSQL processes left running by the killed broker: %v", leftover)

	// A torn last record: a length header promising 1000 bytes, then 10 bytes.
	segs, _ := filepath.Glob(filepath.Join(spoolDir, "*.active"))
	if len(segs) == 0 {
		segs, _ = filepath.Glob(filepath.Join(spoolDir, "*.seg"))
	}
	if len(segs) == 0 {
		t.Fatalf("no spool segment in %s after the kill", spoolDir)
	}
	slices.Sort(segs)
	seg := segs[len(segs)-1]
	torn := binary.LittleEndian.AppendUint32(nil, 1000)
	torn = binary.LittleEndian.AppendUint32(torn, 0xdeadbeef)
	torn = append(torn, "torn-recor"...)
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(torn); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed with %d items answered buffered (%d items sent); appended %d torn bytes to %s", len(answered), len(sent), len(torn), filepath.Base(seg))

	second := startCrashBroker(t, env, base, r.bin)
	if len(leftover) > 0 && !strings.Contains(second.stderr.String(), "stopping the postgresql server left running by a previous process") {
		t.Errorf("the restarted broker did not say it took over the PostgreSQL server left running; its log:\n%s", second.stderr.String())
	}
	var tornLine string
	for _, line := range strings.Split(second.stderr.String(), "\n") {
		if strings.Contains(line, "dropped a torn or corrupt segment tail") && strings.Contains(line, filepath.Base(seg)) {
			tornLine = line
		}
	}
	if tornLine == "" || !strings.Contains(tornLine, "dropped_bytes=") {
		t.Errorf("the restart did not log the torn tail of %s; its log:\n%s", filepath.Base(seg), second.stderr.String())
	} else {
		t.Logf("restart logged: %s", tornLine)
		if !strings.Contains(tornLine, fmt.Sprintf("dropped_bytes=%d ", len(torn))) {
			t.Logf("note: more than the %d torn bytes appended were dropped (the kill cut a write short too)", len(torn))
		}
	}
	var m struct {
		MaintenanceMode  bool  `json:"maintenanceMode"`
		BufferedMessages int64 `json:"bufferedMessages"`
	}
	crashJSON(t, hc, "GET", base+"/api/v1/system/maintenance", nil, 200, &m)
	if !m.MaintenanceMode || m.BufferedMessages < int64(len(answered)) {
		t.Fatalf("after the restart: %+v, want maintenance on and at least %d buffered", m, len(answered))
	}
	t.Logf("after the restart: %d records pending in the spool", m.BufferedMessages)

	crashJSON(t, hc, "POST", base+"/api/v1/system/maintenance", map[string]any{"enabled": false}, 200, nil)

	// Kill it again as soon as the drain has stored something: most likely in the middle of
	// the segment, which the next start then replays from its beginning.
	stored := int64(0)
	drainStarted := testkit.Eventually(time.Minute, func() bool {
		status, raw, err := crashDo(hc, "GET", base+"/api/v1/resources/queues/"+queue, nil)
		if err != nil {
			t.Fatalf("GET queue: %v", err)
		}
		if status == 200 {
			var q struct {
				Totals struct {
					Total int64 `json:"total"`
				} `json:"totals"`
			}
			if err := json.Unmarshal(raw, &q); err != nil {
				t.Fatalf("GET queue: %s: %v", raw, err)
			}
			stored = q.Totals.Total
		} else if status != 404 {
			t.Fatalf("GET queue: %d %s", status, raw)
		}
		return stored > 0
	})
	if !drainStarted {
		t.Fatalf("the drain stored nothing in a minute; broker log:\n%s", second.stderr.String())
	}
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-second.exited
	t.Logf("killed the broker again during the drain, after it had stored %d of the %d spooled records", stored, m.BufferedMessages)

	third := startCrashBroker(t, env, base, r.bin)
	if strings.Contains(third.stderr.String(), "dropped a torn or corrupt segment tail") {
		t.Errorf("the torn tail was cut off at the first restart, yet the second restart found one:\n%s", third.stderr.String())
	}
	crashJSON(t, hc, "GET", base+"/api/v1/system/maintenance", nil, 200, &m)
	if m.MaintenanceMode {
		t.Fatalf("maintenance was turned off before the second kill, yet the broker restarted in it: %+v", m)
	}
	var spooled struct {
		Pending int64 `json:"pending"`
		Failed  int64 `json:"failed"`
	}
	if !testkit.Eventually(time.Minute, func() bool {
		crashJSON(t, hc, "GET", base+"/api/v1/status/buffers", nil, 200, &spooled)
		return spooled.Pending == 0
	}) {
		t.Fatalf("spool not drained in a minute: %+v", spooled)
	}
	if spooled.Failed != 0 {
		t.Errorf("%d spooled records refused for good", spooled.Failed)
	}

	// Everything, auto-acknowledged.
	got := map[int]int{}
	last := map[string]int{}
	for {
		var p struct {
			Messages []struct {
				Data          json.RawMessage `json:"data"`
				Partition     string          `json:"partition"`
				TransactionID string          `json:"transactionId"`
			} `json:"messages"`
		}
		crashJSON(t, hc, "GET", base+"/api/v1/pop/queue/"+queue+"?batch=1000&autoAck=true", nil, 200, &p)
		if len(p.Messages) == 0 {
			break
		}
		for _, msg := range p.Messages {
			var d struct {
				N    int    `json:"n"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(msg.Data, &d); err != nil || d.Text != "payload ☃ "+strconv.Itoa(d.N) || msg.TransactionID != fmt.Sprintf("crash-%d", d.N) {
				t.Errorf("damaged message: %s (transactionId %s)", msg.Data, msg.TransactionID)
				continue
			}
			got[d.N]++
			if prev, ok := last[msg.Partition]; ok && d.N <= prev {
				t.Errorf("partition %s: message %d delivered after %d", msg.Partition, d.N, prev)
			}
			last[msg.Partition] = d.N
		}
	}
	missing, extra := 0, 0
	for _, n := range answered {
		if got[n] != 1 {
			missing++
			if missing <= 10 {
				t.Errorf("message %d, answered buffered before the kill, delivered %d times", n, got[n])
			}
		}
	}
	for n, k := range got {
		if !sent[n] {
			t.Errorf("message %d delivered but never sent", n)
		}
		if k != 1 {
			t.Errorf("message %d delivered %d times", n, k)
		}
		if !buffered[n] {
			extra++
		}
	}
	t.Logf("delivered %d messages: all %d answered buffered before the kill, plus %d in flight at the kill", len(got), len(answered)-missing, extra)

	// SIGTERM: the broker stops, and its PostgreSQL with it.
	if err := third.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-third.exited:
		if err != nil {
			t.Errorf("the broker exited with %v after SIGTERM:\n%s", err, third.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the broker did not exit within a minute of SIGTERM")
	}
	if pids := postmasterPIDs(pgdata); len(pids) > 0 {
		t.Errorf("PostgreSQL processes of %s still running after the broker stopped: %v", pgdata, pids)
	}
	if _, err := os.Stat(filepath.Join(pgdata, "postmaster.pid")); err == nil {
		t.Errorf("postmaster.pid left in %s after the broker stopped", pgdata)
	}
}
