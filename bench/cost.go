package main

import (
	"context"
	"fmt"
)

// costScenario measures what a message costs: the full cycle (push with a transactionId,
// leased pop, ack in a batch) at the shape of Queen's published soak test (push 100 × 256 B,
// pops of up to 1,000, queenmq.com/benchmarks), with the consumers keeping up, so that the CPU
// the broker and PostgreSQL spent over the window divided by the messages pushed is the cost of
// one message through all three steps.
var costScenario = scenario{
	name: "cost",
	help: "CPU µs per message, broker and PostgreSQL, for the full cycle: push 100×256 B with\ntransactionIds over 200 partitions, leased pops of up to 1,000, acks in batches, at once;\nproducers wait while the consumers are --max-lag behind; fails when the lag still grows",
	own:  []string{"rate", "pop-batch", "max-lag"},
	// The producers wait while the consumers are more than 100k messages behind (500 a
	// partition): the rate is the cycle's, and pops still find hundreds of messages each.
	defaults: map[string]string{"partitions": "200", "conns": "8", "consumers": "4", "pop-batch": "1000",
		"max-lag": "100000", "duration": "30s", "warmup": "5s"},
	jobs: func(o *options) []job { return []job{newJob("cost", costConfig(o.mixed()), RunCost)} },
}

// costConfig is the cycle of the cost scenario: a mixed run in queue mode with acks.
type costConfig MixedConfig

func (c costConfig) label() string {
	return fmt.Sprintf("cost push %d×%dB p%d c%d + pop%d+ack c%d", c.Batch, c.Size, c.Partitions, c.Conns, c.PopBatch, c.Consumers)
}

// RunCost runs the cycle and reports it as a cost: the CPU per message is only the cost of the
// cycle if every message pushed in the window was also consumed in it, so a growing lag fails.
func RunCost(ctx context.Context, t *Target, cfg costConfig) (*Result, error) {
	r, err := RunMixed(ctx, t, MixedConfig(cfg))
	if err != nil {
		return nil, err
	}
	r.Scenario, r.Label = "cost", cfg.label()
	if r.LagGrowing != nil && *r.LagGrowing {
		r.fail("the consumers fell behind, so the CPU per message is not the cycle's: add --consumers, lower --max-lag or cap --rate")
	}
	if r.BrokerUsPerMsg != nil && r.PGUsPerMsg != nil {
		r.note("per message pushed, popped and acknowledged: broker %.1f µs, PostgreSQL %.1f µs of CPU", *r.BrokerUsPerMsg, *r.PGUsPerMsg)
	}
	return r.done(), nil
}
