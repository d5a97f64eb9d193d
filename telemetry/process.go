package telemetry

import (
	"bytes"
	"os"
	rtmetrics "runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// Process are this process's memory and CPU figures, for GET /metrics.
type Process struct {
	RSS       int64  // resident memory, bytes (0 where /proc is missing)
	Virtual   int64  // virtual memory, bytes (0 where /proc is missing)
	HeapUsed  uint64 // bytes of heap objects, live or not yet swept
	HeapTotal uint64 // bytes of heap the runtime holds, used or free, not released to the system
	CPUUser   time.Duration
	CPUSystem time.Duration
}

var heapSamples = []rtmetrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
}

// ReadProcess reads the figures. It does not stop the world (runtime/metrics, not
// runtime.ReadMemStats), so a busy scrape does not pause the broker.
func ReadProcess() Process {
	var p Process
	p.Virtual, p.RSS = statm()
	samples := make([]rtmetrics.Sample, len(heapSamples))
	copy(samples, heapSamples)
	rtmetrics.Read(samples)
	for i, s := range samples {
		if s.Value.Kind() != rtmetrics.KindUint64 {
			continue
		}
		if i == 0 {
			p.HeapUsed = s.Value.Uint64()
		}
		p.HeapTotal += s.Value.Uint64()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		p.CPUUser = time.Duration(ru.Utime.Nano())
		p.CPUSystem = time.Duration(ru.Stime.Nano())
	}
	return p
}

// residentBytes is the resident set size.
func residentBytes() int64 {
	_, rss := statm()
	return rss
}

// statm reads the virtual and resident sizes from /proc/self/statm (its first two fields, in
// pages); zeros where it cannot be read.
func statm() (virtual, resident int64) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0
	}
	fields := bytes.Fields(b)
	if len(fields) < 2 {
		return 0, 0
	}
	v, err1 := strconv.ParseInt(string(fields[0]), 10, 64)
	r, err2 := strconv.ParseInt(string(fields[1]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	page := int64(os.Getpagesize())
	return v * page, r * page
}
