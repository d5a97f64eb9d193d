package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Percentiles of a latency sample, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

// latencies collects durations from one goroutine; merge them once the goroutines are done,
// so the hot path takes no lock.
type latencies []time.Duration

func percentiles(all ...latencies) Percentiles {
	var d []time.Duration
	for _, l := range all {
		d = append(d, l...)
	}
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	// Nearest-rank: the smallest value with at least q of the sample at or below it.
	at := func(q float64) float64 {
		i := int(q*float64(len(d))+0.999999) - 1
		i = max(0, min(i, len(d)-1))
		return ms(d[i])
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: ms(d[len(d)-1]), N: len(d)}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// clockTick is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports (the kernel fixes it for the user ABI regardless of CONFIG_HZ).
const clockTick = 100

// procStat is the part of /proc/<pid>/stat the bench uses.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime..cstime are fields 14..17.
	if len(f) < 15 {
		return procStat{}, false
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	return procStat{ppid: int(num(f[1])), utime: num(f[11]), stime: num(f[12]), cutime: num(f[13]), cstime: num(f[14])}, true
}

// processCPU is the CPU time used by pid itself, in seconds.
func processCPU(pid int) (float64, bool) {
	st, ok := readProcStat(pid)
	if !ok {
		return 0, false
	}
	return float64(st.utime+st.stime) / clockTick, true
}

// treeCPU is the CPU time, in seconds, of a PostgreSQL server: the postmaster including the
// children it has reaped (exited backends land in its cutime/cstime), plus its live children.
// The difference of two readings is then exact even when backends come and go in between.
func treeCPU(root int) (float64, bool) {
	st, ok := readProcStat(root)
	if !ok {
		return 0, false
	}
	total := st.utime + st.stime + st.cutime + st.cstime
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if c, ok := readProcStat(pid); ok && c.ppid == root {
			total += c.utime + c.stime
		}
	}
	return float64(total) / clockTick, true
}

// statusKB reads a "Name:   123 kB" line of /proc/<pid>/status.
func statusKB(pid int, name string) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// postmasterPID reads the server's pid from the first line of <pgdata>/postmaster.pid.
func postmasterPID(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// rssTargetMB is the broker's memory target: the seconds of a measured window above it are
// named in the notes (reported, not failed: RSS depends on the machine's other load).
const rssTargetMB = 64

// monitor measures the broker's and PostgreSQL's CPU over the measured window (begin to end)
// and the broker's RSS in each second of it.
type monitor struct {
	t        *Target
	stopRSS  chan struct{}
	rssDone  chan struct{}
	mu       sync.Mutex
	hwmReset bool      // clear_refs works: VmHWM is the peak since the last reset
	secKB    int64     // the largest VmRSS sample since secFrom
	secFrom  time.Time // start of the second being sampled
	series   []int64   // per second of the window: the peak RSS in kB

	began               bool
	t0                  time.Time
	broker0, pg0, self0 float64
	brokerOK, pgOK      bool
	ended               bool
	cpu                 cpuFigures
}

type cpuFigures struct {
	broker, pg, self *float64 // cores; nil when unknown
}

func startMonitor(t *Target) *monitor {
	m := &monitor{t: t, stopRSS: make(chan struct{}), rssDone: make(chan struct{})}
	if t.BrokerPID > 0 {
		go m.sampleRSS()
	} else {
		close(m.rssDone)
	}
	return m
}

// sampleRSS reads VmRSS every 250 ms and, in the measured window, closes a second of the
// series every second.
func (m *monitor) sampleRSS() {
	defer close(m.rssDone)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.stopRSS:
			return
		case <-tick.C:
		}
		kb, ok := statusKB(m.t.BrokerPID, "VmRSS")
		m.mu.Lock()
		if ok {
			m.secKB = max(m.secKB, kb)
		}
		if m.began && !m.ended && time.Since(m.secFrom) >= time.Second {
			m.closeSecond()
			m.secFrom = m.secFrom.Add(time.Second) // seconds of the window, not of the ticks
		}
		m.mu.Unlock()
	}
}

// resetHWM resets VmHWM to the current RSS (writing 5 to clear_refs), so that the next reading
// is the peak since now, between the samples too. It needs ownership of the process, which we
// have when we started it; otherwise the 250 ms samples alone make the figure.
func (m *monitor) resetHWM() bool {
	return os.WriteFile("/proc/"+strconv.Itoa(m.t.BrokerPID)+"/clear_refs", []byte("5"), 0) == nil
}

// closeSecond appends the peak of the second that ends now to the series; m.mu is held.
func (m *monitor) closeSecond() {
	kb := m.secKB
	if m.hwmReset {
		if hwm, ok := statusKB(m.t.BrokerPID, "VmHWM"); ok {
			kb = max(kb, hwm)
		}
		m.hwmReset = m.resetHWM()
	}
	if kb > 0 {
		m.series = append(m.series, kb)
	}
	m.secKB = 0
}

func (m *monitor) cpuNow() (broker, pg, self float64, brokerOK, pgOK bool) {
	if m.t.BrokerPID > 0 {
		broker, brokerOK = processCPU(m.t.BrokerPID)
		for _, pid := range m.t.MoreBrokerPIDs {
			more, ok := processCPU(pid)
			broker, brokerOK = broker+more, brokerOK && ok
		}
	}
	if m.t.PGPID > 0 {
		pg, pgOK = treeCPU(m.t.PGPID)
	}
	self, _ = processCPU(os.Getpid())
	return
}

// begin marks the start of the measured window.
func (m *monitor) begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.began {
		return
	}
	m.began, m.t0 = true, time.Now()
	m.broker0, m.pg0, m.self0, m.brokerOK, m.pgOK = m.cpuNow()
	// The series is the measured window's: the pre-fill's and the warmup's peaks are not the
	// scenario's, but what they left mapped when the window opens is.
	if m.t.BrokerPID > 0 {
		m.secFrom = m.t0
		m.secKB, _ = statusKB(m.t.BrokerPID, "VmRSS")
		m.hwmReset = m.resetHWM()
	}
}

// end marks the end of the measured window; later calls do nothing.
func (m *monitor) end() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.began || m.ended {
		return
	}
	m.ended = true
	if m.t.BrokerPID > 0 {
		m.closeSecond() // the last, partial second
	}
	secs := time.Since(m.t0).Seconds()
	if secs <= 0 {
		return
	}
	b, p, s, bOK, pOK := m.cpuNow()
	cores := func(d float64) *float64 { v := d / secs; return &v }
	if m.brokerOK && bOK {
		m.cpu.broker = cores(b - m.broker0)
	}
	if m.pgOK && pOK {
		m.cpu.pg = cores(p - m.pg0)
	}
	m.cpu.self = cores(s - m.self0)
}

// finish stops the sampling and fills the resource figures of r.
func (m *monitor) finish(r *Result) {
	m.end()
	close(m.stopRSS)
	<-m.rssDone
	m.mu.Lock()
	defer m.mu.Unlock()
	r.BrokerCPU, r.PGCPU, r.BenchCPU = m.cpu.broker, m.cpu.pg, m.cpu.self
	r.setRSS(m.series)
}

// setRSS fills the broker's RSS figures from the per-second peaks (kB) of the window, and
// notes the seconds above the target.
func (r *Result) setRSS(series []int64) {
	if len(series) == 0 {
		return
	}
	var peak float64
	var over []string
	r.BrokerRSSPerSec = make([]float64, len(series))
	for i, kb := range series {
		mb := math.Round(float64(kb)/102.4) / 10 // MB, one decimal
		r.BrokerRSSPerSec[i] = mb
		peak = max(peak, mb)
		if mb > rssTargetMB {
			over = append(over, fmt.Sprintf("%d: %.0f MB", i+1, mb))
		}
	}
	r.BrokerRSSMB = &peak
	if len(over) > 0 {
		r.note("broker RSS above %d MB in %d of %d seconds of the window (second: peak): %s",
			rssTargetMB, len(over), len(series), strings.Join(over, ", "))
	}
}
