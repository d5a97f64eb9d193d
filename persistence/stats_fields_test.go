package persistence

import (
	"reflect"
	"testing"
)

// Every counter field of QueueCounters and BrokerStats is in its table once: a field added
// without its line would be neither flushed, read nor added up.
func TestCounterTablesCoverTheFields(t *testing.T) {
	check := func(name string, v any, fields []*int64, apart ...string) {
		t.Helper()
		rv := reflect.ValueOf(v).Elem()
		seen := map[*int64]bool{}
		for _, f := range fields {
			if seen[f] {
				t.Errorf("%s: a field is in the table twice", name)
			}
			seen[f] = true
		}
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if f.Type.Kind() != reflect.Int64 || f.Anonymous {
				continue
			}
			in := seen[rv.Field(i).Addr().Interface().(*int64)]
			isApart := false
			for _, a := range apart {
				isApart = isApart || a == f.Name
			}
			if in == isApart {
				t.Errorf("%s.%s: in the table %v, merged apart %v", name, f.Name, in, isApart)
			}
		}
	}
	var q QueueCounters
	var qf []*int64
	for _, c := range queueCounters {
		qf = append(qf, c.of(&q))
	}
	check("QueueCounters", &q, qf, "LagMaxMs")
	var b BrokerStats
	var bf []*int64
	for _, c := range brokerCounters {
		bf = append(bf, c.of(&b))
	}
	check("BrokerStats", &b, bf, "LagMaxMs")
}

func TestQueueCountersAddAndSince(t *testing.T) {
	a := QueueCounters{PushMessages: 5, AckFailed: 1, LagSumMs: 10, LagMaxMs: 7}
	b := QueueCounters{PushMessages: 2, DLQ: 1, LagSumMs: 5, LagMaxMs: 9}
	sum := a
	sum.Add(b)
	if want := (QueueCounters{PushMessages: 7, AckFailed: 1, DLQ: 1, LagSumMs: 15, LagMaxMs: 9}); sum != want {
		t.Fatalf("Add: %+v, want %+v", sum, want)
	}
	if got, want := sum.Since(a), (QueueCounters{PushMessages: 2, DLQ: 1, LagSumMs: 5, LagMaxMs: 9}); got != want {
		t.Fatalf("Since: %+v, want %+v", got, want)
	}
}
