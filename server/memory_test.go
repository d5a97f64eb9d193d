package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestConnectionsKeepNoLargeBodies: keep-alive connections that each carried a 1000-message
// push (a 0.3 MB body, a 0.2 MB answer) and stay open must not keep those buffers alive. The
// broker's live heap, measured in this process after collections, grew by about 0.5 MB per
// such connection while fasthttp kept each connection's buffers at their largest size.
func TestConnectionsKeepNoLargeBodies(t *testing.T) {
	const conns, items = 40, 1000
	c := startBroker(t)
	createQueue(t, c, "memory")
	payload := strings.Repeat("x", 256)
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"queue":"memory","partition":"p%d","payload":{"v":%q}}`, i%10, payload)
	}
	b.WriteString(`]}`)
	request := fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		strings.TrimPrefix(c.Base, "http://"), b.Len(), b.String())

	// pushOn sends the push on a new connection, checks the answer, and leaves the connection
	// open and idle, as a client's keep-alive pool does.
	pushOn := func() net.Conn {
		t.Helper()
		cn, err := net.Dial("tcp", strings.TrimPrefix(c.Base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cn.Close() })
		if _, err := io.WriteString(cn, request); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(cn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var results []pushResult
		if err := json.NewDecoder(resp.Body).Decode(&results); err != nil || resp.StatusCode != 200 || len(results) != items {
			t.Fatalf("push: HTTP %d, %d results, %v; want 200 and %d results", resp.StatusCode, len(results), err, items)
		}
		return cn
	}
	liveHeap := func() uint64 {
		runtime.GC()
		runtime.GC() // a second cycle frees what the first one's finalizers and pools released
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	pushOn() // the queue's actor, partitions and pools exist before the measure
	before := liveHeap()
	for range conns {
		pushOn()
	}
	after := liveHeap()
	grown := int64(after) - int64(before)
	t.Logf("live heap %.1f MB before, %.1f MB after %d idle connections that carried a %d-message push",
		float64(before)/(1<<20), float64(after)/(1<<20), conns, items)
	if grown > 4<<20 {
		t.Fatalf("the live heap grew by %.1f MB with %d idle connections: the broker keeps their request or answer buffers",
			float64(grown)/(1<<20), conns)
	}
}
