package actors

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"queen/persistence"
)

func TestRecheckKeyIgnoresHowMuchAPopTakes(t *testing.T) {
	from := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	sameInstant := from.In(time.FixedZone("CET", 3600))
	base := persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: "g", Batch: 1, Partitions: 1, SubscribeFrom: &from, LeaseID: uuid.New()}

	same := base
	same.Batch, same.Partitions, same.AutoAck, same.LeaseID = 50, 4, true, uuid.New()
	same.SubscribeFrom = &sameInstant
	if keyOf(same) != keyOf(base) {
		t.Fatal("batch, partitions, autoAck, lease id and the time zone of subscriptionFrom must not split a key")
	}

	later := from.Add(time.Second)
	for name, change := range map[string]func(*persistence.PopRequest){
		"group":         func(p *persistence.PopRequest) { p.Group = "other" },
		"partition":     func(p *persistence.PopRequest) { p.Partition = "p1" },
		"subscribeNow":  func(p *persistence.PopRequest) { p.SubscribeNow = true },
		"subscribeFrom": func(p *persistence.PopRequest) { p.SubscribeFrom = &later },
		"from the start": func(p *persistence.PopRequest) {
			p.SubscribeFrom = nil
		},
	} {
		other := base
		change(&other)
		if keyOf(other) == keyOf(base) {
			t.Errorf("a different %s must make a different key", name)
		}
	}
}

func TestOneOfRunsOnePopAtATime(t *testing.T) {
	var o OneOf
	retried := 0
	retry := func() { retried++ }
	if !o.begin(retry) {
		t.Fatal("a free OneOf must let a pop run")
	}
	if o.begin(retry) || o.begin(retry) {
		t.Fatal("a second pop must wait while the first runs")
	}
	o.end(false)
	if retried != 2 || o.done() {
		t.Fatalf("an empty answer must retry the %d waiting pops (retried %d) and not end it", 2, retried)
	}
	if !o.begin(retry) {
		t.Fatal("the retried pop must run")
	}
	o.end(true)
	if !o.done() {
		t.Fatal("a delivery must end the namespace pop")
	}
	if o.begin(retry) || retried != 3 {
		t.Fatalf("after the end no pop may run, and the caller is told at once (retried %d)", retried)
	}
	if (*OneOf)(nil).done() {
		t.Fatal("a pop without OneOf is never done by another")
	}
}
