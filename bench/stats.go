package main

import (
	"bufio"
	"bytes"
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

// monitor measures the broker's and PostgreSQL's CPU over the measured window (begin to end)
// and the broker's peak RSS over the whole scenario.
type monitor struct {
	t        *Target
	stopRSS  chan struct{}
	rssDone  chan struct{}
	mu       sync.Mutex
	peakKB   int64
	hwmReset bool

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
		// Writing 5 to clear_refs resets VmHWM, so the peak is this scenario's, not the
		// process lifetime's. It needs ownership of the process, which we have when we
		// started it; the 250 ms samples below are the fallback.
		m.hwmReset = os.WriteFile("/proc/"+strconv.Itoa(t.BrokerPID)+"/clear_refs", []byte("5"), 0) == nil
		go m.sampleRSS()
	} else {
		close(m.rssDone)
	}
	return m
}

func (m *monitor) sampleRSS() {
	defer close(m.rssDone)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if kb, ok := statusKB(m.t.BrokerPID, "VmRSS"); ok {
			m.mu.Lock()
			m.peakKB = max(m.peakKB, kb)
			m.mu.Unlock()
		}
		select {
		case <-m.stopRSS:
			return
		case <-tick.C:
		}
	}
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
	// The peak is the measured window's: what an untimed pre-fill or the warmup left mapped
	// is not the scenario's footprint.
	m.peakKB = 0
	if m.hwmReset {
		m.hwmReset = os.WriteFile("/proc/"+strconv.Itoa(m.t.BrokerPID)+"/clear_refs", []byte("5"), 0) == nil
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
	peak := m.peakKB
	if m.t.BrokerPID > 0 && m.hwmReset {
		if hwm, ok := statusKB(m.t.BrokerPID, "VmHWM"); ok {
			peak = max(peak, hwm)
		}
	}
	if peak > 0 {
		mb := float64(peak) / 1024
		r.BrokerRSSMB = &mb
	}
}
