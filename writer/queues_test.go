package writer

import (
	"context"
	"testing"

	"queen/persistence"
)

func TestEncryptedQueuesReloadDoesNotUndoALocalChange(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	a, b := persistence.QueueName{Name: "a"}, persistence.QueueName{Tenant: "t", Name: "b"}
	db := []persistence.QueueName{a}
	first := true
	q := NewEncryptedQueues(func(context.Context) ([]persistence.QueueName, error) {
		if first {
			first = false
			entered <- struct{}{}
			<-release
		}
		return db, nil
	}, nil)
	done := make(chan bool)
	go func() {
		fresh, _ := q.Reload(context.Background())
		done <- fresh
	}()
	<-entered
	q.Set(b, true) // configured here while the reload reads
	close(release)
	if <-done {
		t.Fatal("a reload that raced with Set was applied")
	}
	if !q.Encrypted(b) || q.Encrypted(a) {
		t.Fatalf("after a raced reload: a=%v b=%v, want the local state", q.Encrypted(a), q.Encrypted(b))
	}
	db = []persistence.QueueName{a, b}
	if fresh, err := q.Reload(context.Background()); !fresh || err != nil {
		t.Fatalf("Reload = %v, %v", fresh, err)
	}
	if !q.Encrypted(a) || !q.Encrypted(b) {
		t.Fatal("a clean reload was not applied")
	}
	q.Set(a, false)
	if q.Encrypted(a) {
		t.Fatal("Set false kept the queue")
	}
}
