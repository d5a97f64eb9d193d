package persistence

import (
	"bytes"
	"testing"
)

// The stored text of a queue name is a storage format (database rows, spool records, mesh
// frames, envelope bindings): it must not change, and it reads back to the same QueueName.
func TestQueueNameStoredText(t *testing.T) {
	for _, tc := range []struct {
		q      QueueName
		stored string
	}{
		{QueueName{Name: "orders"}, "orders"},
		{QueueName{Name: "billing.invoices"}, "billing.invoices"},
		{QueueName{Tenant: "acme", Name: "orders"}, "acme\x1forders"},
		{QueueName{Tenant: "acme.eu-1", Name: "billing.invoices"}, "acme.eu-1\x1fbilling.invoices"},
		{QueueName{Tenant: "acme"}, "acme\x1f"}, // configure takes an empty name
	} {
		if got := tc.q.Stored(); got != tc.stored {
			t.Errorf("%+v stored as %q, want %q", tc.q, got, tc.stored)
		}
		if got := ParseQueueName(tc.stored); got != tc.q {
			t.Errorf("%q read back as %+v, want %+v", tc.stored, got, tc.q)
		}
	}
	// Whatever a row or a record holds reads back to a name stored as the same text.
	for _, stored := range []string{"", "\x1f", "\x1fq", "a\x1fb\x1fc", "a\x1f\x1f"} {
		if got := ParseQueueName(stored).Stored(); got != stored {
			t.Errorf("%q read back and stored again as %q", stored, got)
		}
	}
}

// A spool record names its queue by the stored text, as records written before QueueName
// existed did: such a record reads back as the tenant's queue and is written the same way.
func TestSpoolRecordTenantQueue(t *testing.T) {
	record := []byte(`{"queue":"acme\u001forders","partition":"p","transactionId":"t","payload":{"a":1}}`)
	it, err := DecodeSpoolRecord(record)
	if err != nil {
		t.Fatal(err)
	}
	if want := (QueueName{Tenant: "acme", Name: "orders"}); it.Queue != want {
		t.Fatalf("queue %+v, want %+v", it.Queue, want)
	}
	again, err := EncodeSpoolRecord(it)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, record) {
		t.Fatalf("written back as %s, want %s", again, record)
	}
}
