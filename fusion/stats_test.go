package fusion_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"queen/fusion"
)

// Every call of exec is counted under the batcher's op: a fused call and, when it fails, each
// job retried alone.
func TestCallsAreCounted(t *testing.T) {
	set := metrics.NewSet()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	exec := func(_ context.Context, items []int) ([]int, error) {
		if items[0] == 0 {
			entered <- struct{}{}
			<-release // holds the only slot while the next jobs queue up
		}
		if len(items) > 1 {
			return nil, errors.New("refused together")
		}
		return items, nil
	}
	b := fusion.New(fusion.Options{MaxItems: 100, InFlight: 1, Metrics: set, Op: "test"}, exec, func(error) bool { return false })
	defer b.Close()
	done := make(chan error, 3)
	for _, items := range [][]int{{0}, {1}, {2}} {
		b.Submit(fusion.Job[int, int]{Items: items, Done: func(_ []int, err error) { done <- err }})
		if items[0] == 0 {
			<-entered
		}
	}
	close(release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var page bytes.Buffer
	set.WritePrometheus(&page)
	// Calls: {0}; {1,2} fused, refused; {1} and {2} alone.
	for _, want := range []string{
		`queen_batches_fired_total{op="test"} 4`,
		`queen_batch_items_fired_total{op="test"} 5`,
		`queen_fusion_items_per_batch_bucket{op="test",le="1"} 3`,
		`queen_fusion_items_per_batch_bucket{op="test",le="2"} 4`,
		`queen_fusion_items_per_batch_count{op="test"} 4`,
		`queen_batch_rtt_seconds_count{op="test"} 4`,
	} {
		if !strings.Contains(page.String(), want+"\n") {
			t.Errorf("missing %s in\n%s", want, page.String())
		}
	}
}
