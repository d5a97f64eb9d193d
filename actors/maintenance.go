package actors

import "sync/atomic"

// Maintenance holds the two maintenance flags, read on every push and pop. The server keeps
// them in step with queen.system_state and the mesh.
type Maintenance struct {
	push, pop atomic.Bool
}

// Push reports push maintenance: pushes go to the disk spool.
func (m *Maintenance) Push() bool { return m.push.Load() }

// Pop reports pop maintenance: pops answer empty at once.
func (m *Maintenance) Pop() bool { return m.pop.Load() }

// SetPush sets push maintenance and reports whether it changed.
func (m *Maintenance) SetPush(on bool) bool { return m.push.Swap(on) != on }

// SetPop sets pop maintenance and reports whether it changed.
func (m *Maintenance) SetPop(on bool) bool { return m.pop.Swap(on) != on }
