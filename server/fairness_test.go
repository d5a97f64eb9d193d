package server_test

import (
	"fmt"
	"slices"
	"testing"
)

// Wildcard pops through the API serve every partition with data in turn: with 500 partitions
// of two messages each, the first 500 pops of one message each deliver the first message of
// every partition, once, and the next 500 the second ones. The broker carries each pop's place
// in the round to the next pop of the group.
func TestWildcardPopsServeEveryPartitionInTurn(t *testing.T) {
	t.Parallel()
	const partitions = 500
	c := startBroker(t)
	var names []string
	for k := 1; k <= 2; k++ {
		var items []item
		for i := range partitions {
			name := fmt.Sprintf("p%03d", i)
			if k == 1 {
				names = append(names, name)
			}
			items = append(items, item{"queue": "round", "partition": name, "payload": k})
		}
		push(t, c, items...)
	}
	for _, group := range []string{"", "g"} {
		for round := 1; round <= 2; round++ {
			var got []string
			for range partitions {
				kv := []string{"batch", "1", "autoAck", "true"}
				if group != "" {
					kv = append(kv, "consumerGroup", group)
				}
				p := pop(t, c, "/api/v1/pop/queue/round", kv...)
				if len(p.Messages) != 1 || string(p.Messages[0].Data) != fmt.Sprint(round) {
					t.Fatalf("group %q, round %d, pop %d: %s; want message %d of a partition not served yet",
						group, round, len(got)+1, fmtJSON(p), round)
				}
				got = append(got, p.Messages[0].Partition)
			}
			slices.Sort(got)
			if !slices.Equal(got, names) {
				t.Fatalf("group %q: round %d did not deliver every partition once", group, round)
			}
		}
	}
}
