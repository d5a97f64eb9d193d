package persistence

import (
	"sync"

	"github.com/google/uuid"
)

// maxLeasedMessages bounds what leasedMessages holds: at ~60 bytes a message, a few MB. The
// consumers of a busy broker hold far fewer messages unacknowledged at once; past the bound the
// oldest leases are forgotten and their acks probe the database, as acks of leases this broker
// did not grant always do.
const maxLeasedMessages = 64 << 10

// leaseKey is one partition claimed under one lease: a wildcard pop claims several under one id.
type leaseKey struct {
	lease     string // as the clients send it back: the lowercase text form
	partition uuid.UUID
}

// leasedMessages remembers, for each lease this broker granted, the sequence number of each
// message it delivered, so that an acknowledgement naming that lease finds its message without
// a probe of message_transactions' key (the largest statement of an ack, see ackedMessagesSQL).
// It is a cache and nothing more: the ack still locks the consumer row and checks the lease in
// force there, and a miss (another broker's lease, a restart, an evicted lease) probes.
type leasedMessages struct {
	mu     sync.Mutex
	leases map[leaseKey]*leasedClaim
	order  []leaseKey // insertion order, for eviction; may name forgotten leases
	held   int        // messages in leases
}

// leasedClaim is what one claim of a pop delivered: enough to answer an acknowledgement of it
// without reading the partition's names (see ackLeased).
type leasedClaim struct {
	queue     QueueName
	partition string           // the partition's name
	seqs      map[string]int64 // transactionId → seq
}

// leasedHit is what leasedMessages knows of one acknowledged message.
type leasedHit struct {
	seq   int64 // 0: not known
	claim *leasedClaim
}

func newLeasedMessages() *leasedMessages {
	return &leasedMessages{leases: map[leaseKey]*leasedClaim{}}
}

// remember records the messages a pop of queue delivered under lease.
func (l *leasedMessages) remember(lease uuid.UUID, queue QueueName, msgs []Message) {
	if len(msgs) == 0 || len(msgs) > maxLeasedMessages {
		return
	}
	id := lease.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < len(msgs); {
		k := leaseKey{id, msgs[i].Partition.ID}
		end := i + 1
		for end < len(msgs) && msgs[end].Partition.ID == k.partition {
			end++
		}
		seqs := make(map[string]int64, end-i) // sized once: a claim delivers up to thousands
		for ; i < end; i++ {
			seqs[msgs[i].TransactionID] = msgs[i].Seq
		}
		l.forgetLocked(k)
		l.leases[k] = &leasedClaim{queue: queue, partition: msgs[end-1].Partition.Name, seqs: seqs}
		l.order = append(l.order, k)
		l.held += len(seqs)
	}
	for l.held > maxLeasedMessages {
		k := l.order[0]
		l.order = l.order[1:]
		l.forgetLocked(k)
	}
	// Keys of leases forgotten on release stay in order until eviction reaches them: compact
	// when they outnumber the live ones, so order stays within a small multiple of leases.
	if len(l.order) > 2*len(l.leases)+64 {
		live := l.order[:0]
		for _, k := range l.order {
			if _, ok := l.leases[k]; ok {
				live = append(live, k)
			}
		}
		l.order = live
	}
}

// lookUp returns what the cache knows of each item (a zero leasedHit when nothing), or nil when
// it knows none of them.
func (l *leasedMessages) lookUp(items []AckItem) []leasedHit {
	var hits []leasedHit
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.leases) == 0 {
		return nil
	}
	for i, it := range items {
		if it.LeaseID == "" {
			continue
		}
		c := l.leases[leaseKey{it.LeaseID, it.PartitionID}]
		if c == nil {
			continue
		}
		seq, ok := c.seqs[it.TransactionID]
		if !ok {
			continue
		}
		if hits == nil {
			hits = make([]leasedHit, len(items))
		}
		hits[i] = leasedHit{seq, c}
	}
	return hits
}

// forget drops what a released lease delivered on a partition.
func (l *leasedMessages) forget(lease string, partition uuid.UUID) {
	l.mu.Lock()
	l.forgetLocked(leaseKey{lease, partition})
	l.mu.Unlock()
}

// forgetTransaction drops a deleted message from every lease, so that an ack of it is answered
// "Message not found", as without the cache.
func (l *leasedMessages) forgetTransaction(partition uuid.UUID, transactionID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, c := range l.leases {
		if k.partition != partition {
			continue
		}
		if _, ok := c.seqs[transactionID]; ok {
			delete(c.seqs, transactionID)
			l.held--
		}
	}
}

func (l *leasedMessages) forgetLocked(k leaseKey) {
	if c, ok := l.leases[k]; ok {
		l.held -= len(c.seqs)
		delete(l.leases, k)
	}
}
