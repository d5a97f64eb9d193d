package conformance_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"queen/pg/pgtest"
	"queen/server/servertest"
)

// popped is a pop answer as the clients read it.
type popped struct {
	Messages []struct {
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		LeaseID       string          `json:"leaseId"`
		Data          json.RawMessage `json:"data"`
	} `json:"messages"`
}

type txAnswer struct {
	Success bool   `json:"success"`
	Error   string `json:"error"`
}

// transform commits, as the clients' transaction builders do, the ack of one input message and
// the push of its result in one transaction, proving the pop's lease in requiredLeases.
func transform(c *servertest.Client, out, tx, partitionID, lease string, data json.RawMessage) (txAnswer, error) {
	body := fmt.Sprintf(`{"operations":[{"type":"ack","transactionId":%q,"partitionId":%q,"status":"completed"},`+
		`{"type":"push","items":[{"queue":%q,"payload":{"from":%s}}]}],"requiredLeases":[%q]}`, tx, partitionID, out, data, lease)
	status, raw := c.Do("POST", "/api/v1/transaction", body)
	var a txAnswer
	if status != 200 {
		return a, fmt.Errorf("transaction: status %d: %s", status, raw)
	}
	return a, json.Unmarshal(raw, &a)
}

// The loop the clients' READMEs teach: workers pop with leases and, per message, commit the ack
// and the push of its result in one transaction. Every input appears downstream exactly once.
func TestConsumeTransformProduce(t *testing.T) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	const partitions, perPartition, workers = 4, 50, 4
	var items []string
	for p := range partitions {
		for i := range perPartition {
			items = append(items, fmt.Sprintf(`{"queue":"in","partition":"p%d","payload":"p%d-%03d"}`, p, p, i))
		}
	}
	if status, raw := c.Do("POST", "/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`); status != 200 {
		t.Fatalf("push: %d %s", status, raw)
	}

	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < partitions*perPartition {
				status, raw := c.Do("GET", "/api/v1/pop/queue/in?batch=5&wait=true&timeout=200", nil)
				var p popped
				if status != 200 || json.Unmarshal(raw, &p) != nil {
					errs <- fmt.Errorf("pop: %d %s", status, raw)
					return
				}
				for _, m := range p.Messages {
					a, err := transform(c, "out", m.TransactionID, m.PartitionID, m.LeaseID, m.Data)
					if err != nil || !a.Success {
						errs <- fmt.Errorf("transaction of %s: %+v %v", m.Data, a, err)
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := &session{t: t, c: c, vars: map[string]string{}}
	got := s.stored("out")
	slices.Sort(got)
	var want []string
	for p := range partitions {
		for i := range perPartition {
			want = append(want, fmt.Sprintf(`{"from":"p%d-%03d"}`, p, i))
		}
	}
	s.expect("downstream", got, want...)
	s.expect("left upstream", s.pop("/api/v1/pop/queue/in?batch=10&wait=false"))
}

// A worker whose lease expired and whose message went to another worker has its transaction
// refused whole: nothing of it is pushed, and the new holder's transaction applies.
func TestTransformUnderALostLeaseIsRefused(t *testing.T) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	c.JSON("POST", "/api/v1/configure", `{"queue":"slow","options":{"leaseTime":1}}`, 200, nil)
	c.JSON("POST", "/api/v1/push", `{"items":[{"queue":"slow","payload":"job"}]}`, 200, nil)
	pop := func(query string) popped {
		var p popped
		c.JSON("GET", "/api/v1/pop/queue/slow?"+query, nil, 200, &p)
		if len(p.Messages) != 1 {
			t.Fatalf("pop %s delivered %d messages", query, len(p.Messages))
		}
		return p
	}
	first := pop("batch=1&wait=false").Messages[0]
	// The second worker's long-poll is answered once the first lease has expired.
	second := pop("batch=1&wait=true&timeout=30000").Messages[0]
	if second.TransactionID != first.TransactionID || second.LeaseID == first.LeaseID {
		t.Fatalf("redelivery: %+v after %+v", second, first)
	}

	a, err := transform(c, "done", first.TransactionID, first.PartitionID, first.LeaseID, first.Data)
	if err != nil || a.Success || a.Error != "ACK operation failed: Invalid or expired lease" {
		t.Fatalf("the stale worker's transaction: %+v %v", a, err)
	}
	a, err = transform(c, "done", second.TransactionID, second.PartitionID, second.LeaseID, second.Data)
	if err != nil || !a.Success {
		t.Fatalf("the holder's transaction: %+v %v", a, err)
	}
	s := &session{t: t, c: c, vars: map[string]string{}}
	s.expect("downstream", s.stored("done"), `{"from":"job"}`)
}
