package server_test

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Queue labels come only from queues that exist and are escaped: pops on made-up names add
// no series, and a name with the characters the exposition format escapes keeps the page
// parseable.
func TestParkedGaugeOnlyForExistingQueues(t *testing.T) {
	c := startBroker(t)
	const odd = `we"ird\queue`
	push(t, c, item{"queue": odd, "payload": 1})
	pop(t, c, "/api/v1/pop/queue/"+url.PathEscape(odd), "autoAck", "true")

	const ghosts = 40
	var waits []<-chan popOutcome
	for i := range ghosts {
		waits = append(waits, popAsync(t, c, fmt.Sprintf("/api/v1/pop/queue/ghost-%d?wait=true&timeout=60000", i)))
	}
	waits = append(waits, popAsync(t, c, "/api/v1/pop/queue/"+url.PathEscape(odd)+"?wait=true&timeout=60000"))
	waitFor(t, "every long-poll to park", func() bool { return counter(t, c, "queen_pop_parked") == ghosts+1 })
	waitFor(t, "the existing queue's gauge", func() bool { return parked(t, c, `we\"ird\\queue`) == 1 })

	_, page := c.Do("GET", "/metrics/prometheus", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("the metrics page does not parse: %v\n%s", err, page)
	}
	fam := families["queen_queue_parked_consumers"]
	if fam == nil || len(fam.Metric) != 1 {
		t.Fatalf("want one parked series (the existing queue), got %v", fam)
	}
	if l := fam.Metric[0].Label; len(l) != 1 || l[0].GetName() != "queue" || l[0].GetValue() != odd {
		t.Fatalf("labels %v, want queue=%q", l, odd)
	}

	// A push makes the name real: its parked pop is delivered, and the gauge follows.
	push(t, c, item{"queue": odd, "payload": 2})
	if out := <-waits[ghosts]; len(out.resp.Messages) != 1 {
		t.Fatalf("the existing queue's long-poll got %+v", out.resp)
	}
	waitFor(t, "the gauge to drop", func() bool { return parked(t, c, `we\"ird\\queue`) == 0 })
}
