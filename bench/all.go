package main

import "fmt"

var allScenario = scenario{
	name: "all",
	help: "the standard set, one table: the ceiling, push of 100 and of 1, pop+ack, autoAck,\nmixed, mixed at a steady rate, fan-out to four groups (drain and live), the cost cycle, wake",
	// The standard set has its own shapes: the flags that set them are refused.
	own:      []string{"pg", "mesh"},
	defaults: map[string]string{"duration": "15s"},
	check: func(o *options) error {
		for _, f := range []string{"batch", "size", "partitions", "conns", "consumers"} {
			if o.set[f] {
				return fmt.Errorf("--%s does not apply to all, which runs the standard set; run the scenario on its own", f)
			}
		}
		return nil
	},
	jobs: func(o *options) []job {
		ceiling := o.ceiling()
		ceiling.Conns = 4
		push := o.push()
		push1 := push
		push1.Batch, push1.Conns = 1, 64
		// The pre-fills are sized so that consumers at the targets (22k msg/s pop+ack, 40k
		// autoAck) are measured for most of the window instead of draining 200k messages in
		// two seconds; a pre-fill of 1000-message pushes is quick.
		consume := o.consume()
		consume.Messages = 400_000
		autoAck := consume
		autoAck.AutoAck, autoAck.Messages = true, 800_000
		fanOut := consume
		fanOut.Groups, fanOut.Consumers, fanOut.Messages = 4, 2, 200_000
		mixed := o.mixed()
		mixed.Conns = 8
		// The steady states: consumers keeping up with 15k msg/s of pushes, and four groups
		// each keeping up with 5k msg/s (20k delivered).
		steady := mixed
		steady.Rate = 15_000
		fanOutLive := mixed
		fanOutLive.Groups, fanOutLive.Consumers, fanOutLive.Rate = 4, 2, 5_000
		// The full cycle at the shape of the cost scenario, for its CPU per message.
		cost := costConfig(mixed)
		cost.Partitions, cost.PopBatch, cost.Consumers, cost.MaxLag = 200, 1000, 4, 100_000
		return []job{
			newJob("ceiling", ceiling, RunCeiling),
			newJob("push", push, RunPush),
			newJob("push", push1, RunPush),
			newJob("consume", consume, RunConsume),
			newJob("consume", autoAck, RunConsume),
			newJob("mixed", mixed, RunMixed),
			newJob("mixed", steady, RunMixed),
			newJob("consume", fanOut, RunConsume),
			newJob("mixed", fanOutLive, RunMixed),
			newJob("cost", cost, RunCost),
			newJob("wake", o.wake(), RunWake),
		}
	},
}
