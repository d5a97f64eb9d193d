package server_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
	"queen/testkit"
)

const testEncryptionKey = "5c0fa1d2e3b4a5968778695a4b3c2d1e0f1e2d3c4b5a69788796a5b4c3d2e1f0"

// withKey gives a test broker QUEEN_ENCRYPTION_KEY.
func withKey(c *config.Config) { c.EncryptionKey, _ = hex.DecodeString(testEncryptionKey) }

// storedRow is a message as PostgreSQL holds it.
type storedRow struct {
	Payload   string
	Encrypted bool
}

// storedRows reads the raw queen.messages rows of queue through the broker's own pool.
func storedRows(t *testing.T, c *servertest.Client, queue string) []storedRow {
	t.Helper()
	rows, err := c.Broker.Store().Pool().Query(context.Background(), `
		SELECT m.payload::text, m.is_encrypted FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 ORDER BY m.seq`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedRow
	for rows.Next() {
		var r storedRow
		if err := rows.Scan(&r.Payload, &r.Encrypted); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSealed fails unless every row is a sealed envelope with a 12-byte nonce, bound to its
// message ("ctx":1), and holds none of the plaintext markers.
func checkSealed(t *testing.T, who string, rows []storedRow, want int, markers ...string) {
	t.Helper()
	if len(rows) != want {
		t.Fatalf("%s: %d rows in queen.messages, want %d", who, len(rows), want)
	}
	for i, r := range rows {
		for _, m := range markers {
			if strings.Contains(r.Payload, m) {
				t.Fatalf("%s: row %d holds the plaintext marker %q: %s", who, i, m, r.Payload)
			}
		}
		var keys map[string]json.RawMessage
		var env struct {
			Encrypted, IV, AuthTag string
			Ctx                    int
		}
		if json.Unmarshal([]byte(r.Payload), &keys) != nil || json.Unmarshal([]byte(r.Payload), &env) != nil ||
			len(keys) != 4 || env.Encrypted == "" || env.AuthTag == "" || env.Ctx != 1 {
			t.Fatalf("%s: row %d is not a bound envelope: %s", who, i, r.Payload)
		}
		if iv, err := base64.StdEncoding.DecodeString(env.IV); err != nil || len(iv) != 12 {
			t.Fatalf("%s: row %d has iv %q, want 12 bytes", who, i, env.IV)
		}
		if !r.Encrypted {
			t.Fatalf("%s: row %d is_encrypted is false", who, i)
		}
	}
}

// spoolBytes reads every file under the spool directory.
func spoolBytes(t *testing.T, dir string) []byte {
	t.Helper()
	var all []byte
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		all = append(all, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Payload encryption at rest: PostgreSQL and the spool files hold only ciphertext for a queue
// configured with encryptionEnabled, on every write path (push, spool and its replay,
// transaction, a stale flag cache); pop, message detail and the DLQ answer in clear; a broker
// without the key refuses pushes to that queue instead of storing them in clear.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	cs := pgtest.NewDatabase(t)
	spoolDir := t.TempDir()
	c := servertest.Start(t, cs, withKey, func(c *config.Config) {
		c.SpoolDir, c.SpoolFlush = spoolDir, 20*time.Millisecond
	})
	const queue = "vault"
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"encryptionEnabled": true}}, 200, nil)

	// Push straight to PostgreSQL.
	pushWant(t, c, 200, "queued", item{"queue": queue, "payload": map[string]any{"secret": "MARKER-direct-7f3a"}, "transactionId": "direct"})
	checkSealed(t, "direct push", storedRows(t, c, queue), 1, "MARKER-direct-7f3a")

	// Push maintenance: the push goes to the spool, which must hold ciphertext too. A clear
	// queue's marker in the same spool shows the files are searchable as they are.
	setPushMaint(t, c, true)
	pushWant(t, c, 201, "buffered", item{"queue": queue, "payload": map[string]any{"secret": "MARKER-spooled-91bd"}, "transactionId": "spooled"})
	pushWant(t, c, 201, "buffered", item{"queue": "clearq", "payload": map[string]any{"note": "MARKER-clear-c0de"}})
	spooled := spoolBytes(t, spoolDir)
	if bytes.Contains(spooled, []byte("MARKER-spooled-91bd")) {
		t.Fatal("the spool files hold the encrypted queue's payload in clear")
	}
	if !bytes.Contains(spooled, []byte("MARKER-clear-c0de")) {
		t.Fatalf("the clear queue's marker is not in the spool files (%d bytes): the search proves nothing", len(spooled))
	}
	setPushMaint(t, c, false)
	testkit.WaitFor(t, 30*time.Second, "the spool to drain", func() bool { return buffers(t, c).Pending == 0 })
	checkSealed(t, "after the spool drained", storedRows(t, c, queue), 2, "MARKER-direct-7f3a", "MARKER-spooled-91bd")

	// A transaction's push.
	var tx struct {
		Success bool `json:"success"`
	}
	c.JSON("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "push", "items": []item{{"queue": queue, "payload": map[string]any{"secret": "MARKER-tx-44e1"}, "transactionId": "tx"}}},
	}}, 200, &tx)
	if !tx.Success {
		t.Fatal("transaction push failed")
	}
	checkSealed(t, "transaction push", storedRows(t, c, queue), 3, "MARKER-direct-7f3a", "MARKER-spooled-91bd", "MARKER-tx-44e1")

	// Consumers read clear payloads.
	p := popWith(t, c, "/api/v1/pop/queue/"+queue, "batch", "10")
	if len(p.Messages) != 3 {
		t.Fatalf("pop: %d messages, want 3", len(p.Messages))
	}
	for i, want := range []string{`{"secret":"MARKER-direct-7f3a"}`, `{"secret":"MARKER-spooled-91bd"}`, `{"secret":"MARKER-tx-44e1"}`} {
		if got := string(p.Messages[i].Data); got != want {
			t.Fatalf("pop message %d: data %s, want %s", i, got, want)
		}
	}
	m := p.Messages[0]
	var detail struct {
		Payload     json.RawMessage `json:"payload"`
		IsEncrypted bool            `json:"isEncrypted"`
	}
	c.JSON("GET", "/api/v1/messages/"+m.PartitionID+"/"+m.TransactionID, nil, 200, &detail)
	if string(detail.Payload) != `{"secret":"MARKER-direct-7f3a"}` || !detail.IsEncrypted {
		t.Fatalf("message detail: %+v", detail)
	}
	// The dead-letter list decrypts too (the reference returns the envelope there).
	c.JSON("POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
		"leaseId": m.LeaseID, "status": "dlq", "error": "poison"}, 200, nil)
	var dlq struct {
		Messages []struct {
			Data json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	c.JSON("GET", "/api/v1/dlq?queue="+queue, nil, 200, &dlq)
	if len(dlq.Messages) != 1 || string(dlq.Messages[0].Data) != `{"secret":"MARKER-direct-7f3a"}` {
		t.Fatalf("dlq: %+v", dlq)
	}

	// A queue flagged behind this broker's back (another broker, no mesh): the flag cache is
	// stale, and the push transaction, which reads the flag, seals the payload itself.
	pushWant(t, c, 200, "queued", item{"queue": "late", "payload": 0})
	if _, err := c.Broker.Store().Pool().Exec(context.Background(), `UPDATE queen.queues SET encryption_enabled = true WHERE name = 'late'`); err != nil {
		t.Fatal(err)
	}
	pushWant(t, c, 200, "queued", item{"queue": "late", "payload": map[string]any{"secret": "MARKER-late-5a5a"}})
	if rows := storedRows(t, c, "late"); len(rows) != 2 || rows[0].Encrypted {
		t.Fatalf("late: %+v", rows)
	} else {
		checkSealed(t, "push with a stale flag cache", rows[1:], 1, "MARKER-late-5a5a")
	}
	if p := popWith(t, c, "/api/v1/pop/queue/late", "batch", "10"); len(p.Messages) != 2 || string(p.Messages[1].Data) != `{"secret":"MARKER-late-5a5a"}` {
		t.Fatalf("pop of late: %+v", p)
	}

	// A broker without the key refuses pushes to the encrypted queue, on both write routes,
	// and stores nothing.
	keyless := servertest.Start(t, cs)
	status, raw := keyless.Do("POST", "/api/v1/push", map[string]any{"items": []item{
		{"queue": "clearq", "payload": 1}, {"queue": queue, "payload": map[string]any{"secret": "MARKER-nokey"}},
	}})
	if want := `{"error":"queue vault requires encryption but QUEEN_ENCRYPTION_KEY is not set"}`; status != 409 || string(raw) != want {
		t.Fatalf("push without a key: %d %s, want 409 %s", status, raw, want)
	}
	status, raw = keyless.Do("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "push", "items": []item{{"queue": queue, "payload": map[string]any{"secret": "MARKER-nokey"}}}},
	}})
	if status != 409 || !strings.Contains(string(raw), "QUEEN_ENCRYPTION_KEY is not set") {
		t.Fatalf("transaction without a key: %d %s", status, raw)
	}
	// Its flag cache stale as well: the push transaction refuses the item.
	pushWant(t, keyless, 200, "queued", item{"queue": "late2", "payload": 0})
	if _, err := c.Broker.Store().Pool().Exec(context.Background(), `UPDATE queen.queues SET encryption_enabled = true WHERE name = 'late2'`); err != nil {
		t.Fatal(err)
	}
	res := pushWant(t, keyless, 200, "failed", item{"queue": "late2", "payload": map[string]any{"secret": "MARKER-nokey"}})
	if !strings.Contains(res[0].Error, "QUEEN_ENCRYPTION_KEY is not set") {
		t.Fatalf("stale push without a key: %+v", res[0])
	}
	for _, q := range []string{queue, "late2", "clearq"} {
		for _, r := range storedRows(t, c, q) {
			if strings.Contains(r.Payload, "MARKER-nokey") {
				t.Fatalf("queue %s stored a refused payload: %s", q, r.Payload)
			}
		}
	}
}

// Configuring a queue's encryption takes effect on the very next push (the flag cache is updated
// by configure, not by its periodic refresh), both ways.
func TestEncryptionFlagFollowsConfigure(t *testing.T) {
	t.Parallel()
	c := startBroker(t, withKey)
	pushWant(t, c, 200, "queued", item{"queue": "flip", "payload": map[string]any{"n": "MARKER-before"}})
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "flip", "options": map[string]any{"encryptionEnabled": true}}, 200, nil)
	pushWant(t, c, 200, "queued", item{"queue": "flip", "payload": map[string]any{"n": "MARKER-after"}})
	rows := storedRows(t, c, "flip")
	if len(rows) != 2 || rows[0].Encrypted || !strings.Contains(rows[0].Payload, "MARKER-before") {
		t.Fatalf("rows before the flag: %+v", rows)
	}
	checkSealed(t, "after configure", rows[1:], 1, "MARKER-after")
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "flip", "options": map[string]any{"encryptionEnabled": false}}, 200, nil)
	pushWant(t, c, 200, "queued", item{"queue": "flip", "payload": map[string]any{"n": "MARKER-off"}})
	if rows := storedRows(t, c, "flip"); len(rows) != 3 || rows[2].Encrypted {
		t.Fatalf("rows after the flag was cleared: %+v", rows)
	}
	if p := popWith(t, c, "/api/v1/pop/queue/flip", "batch", "10"); len(p.Messages) != 3 || string(p.Messages[1].Data) != `{"n":"MARKER-after"}` {
		t.Fatalf("pop: %+v", p)
	}
}

// Configuring a queue's encryption on broker A reaches broker B over the mesh: B, in push
// maintenance, spools its next push to that queue sealed. B's periodic re-read is set to an
// hour, and the spool is the one write path the push transaction's own check cannot cover, so
// only the mesh announcement can make this pass.
func TestEncryptionFlagCrossesTheMesh(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	lns := make([]net.Listener, 2)
	addrs := make([]string, 2)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	spoolB := t.TempDir()
	env := map[string]string{"QUEEN_CACHE_REFRESH_INTERVAL_MS": "3600000", "QUEEN_ENCRYPTION_KEY": testEncryptionKey}
	a := startMeshNode(t, "enc-a", db, lns[0], addrs, env)
	envB := map[string]string{"FILE_BUFFER_DIR": spoolB}
	for k, v := range env {
		envB[k] = v
	}
	b := startMeshNode(t, "enc-b", db, lns[1], addrs, envB)
	meshReady(t, a, 1)
	meshReady(t, b, 1)

	call[map[string]any](t, b, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, 200)
	call[map[string]any](t, a, "POST", "/api/v1/configure", map[string]any{"queue": "meshvault", "options": map[string]any{"encryptionEnabled": true}}, 200)
	testkit.WaitFor(t, 10*time.Second, "B to spool meshvault's pushes sealed", func() bool {
		marker := fmt.Sprintf("MARKER-mesh-%d", time.Now().UnixNano())
		pushWant(t, b, 201, "buffered", item{"queue": "meshvault", "payload": map[string]any{"secret": marker}})
		return !bytes.Contains(spoolBytes(t, spoolB), []byte(marker))
	})
	call[map[string]any](t, b, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, 200)
	testkit.WaitFor(t, 30*time.Second, "B's spool to drain", func() bool { return buffers(t, b).Pending == 0 })
	p := popWith(t, a, "/api/v1/pop/queue/meshvault", "batch", "1000")
	if len(p.Messages) == 0 || !strings.Contains(string(p.Messages[len(p.Messages)-1].Data), "MARKER-mesh-") {
		t.Fatalf("pop through A: %+v", p)
	}
}

// A broker without a key names, at boot, every queue whose pushes it will refuse, so an
// operator sees it before a client does.
func TestBootLogNamesEncryptedQueuesWithoutKey(t *testing.T) {
	cs := pgtest.NewDatabase(t)
	keyed := servertest.Start(t, cs, withKey)
	for _, q := range []string{"vault-b", "vault-a", "plain"} {
		keyed.JSON("POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"encryptionEnabled": q != "plain"}}, 200, nil)
	}
	var buf testkit.LogBuffer
	servertest.StartLogged(t, cs, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if want := "encryption DISABLED: QUEEN_ENCRYPTION_KEY is unset; pushes are refused (409) to the queues that require it: vault-a, vault-b"; !strings.Contains(buf.String(), want) {
		t.Fatalf("boot log lacks %q:\n%s", want, buf.String())
	}
}

// legacyEnvelope seals plain as envelopes were sealed before they were bound to their message
// (and as the reference broker seals them): no associated data, no marker.
func legacyEnvelope(t *testing.T, plain string) string {
	t.Helper()
	key, err := hex.DecodeString(testEncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := []byte("legacy-nonce")
	sealed := gcm.Seal(nil, nonce, []byte(plain), nil)
	env, err := json.Marshal(map[string]string{
		"encrypted": base64.StdEncoding.EncodeToString(sealed[:len(sealed)-16]),
		"iv":        base64.StdEncoding.EncodeToString(nonce),
		"authTag":   base64.StdEncoding.EncodeToString(sealed[len(sealed)-16:]),
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(env)
}

// An envelope is bound to its queue and its message's transactionId: copied by someone with
// write access to the database into another message's row, of the same queue or of another
// encrypted queue, it does not open, and the broker returns it as stored (as for any envelope
// it cannot open) instead of the other message's plaintext. Envelopes written before the
// binding existed still open.
func TestEncryptionBindsEnvelopeToMessage(t *testing.T) {
	t.Parallel()
	c := startBroker(t, withKey)
	for _, q := range []string{"bound-a", "bound-b"} {
		c.JSON("POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"encryptionEnabled": true}}, 200, nil)
	}
	pushWant(t, c, 200, "queued",
		item{"queue": "bound-a", "payload": map[string]any{"secret": "MARKER-A"}, "transactionId": "msg-a"},
		item{"queue": "bound-a", "payload": map[string]any{"secret": "MARKER-B"}, "transactionId": "msg-b"},
		item{"queue": "bound-a", "payload": map[string]any{"secret": "MARKER-E"}, "transactionId": "msg-e"},
		item{"queue": "bound-b", "payload": map[string]any{"secret": "MARKER-C"}, "transactionId": "msg-c"},
		item{"queue": "bound-b", "payload": map[string]any{"secret": "MARKER-D"}, "transactionId": "msg-d"})

	setPayload := func(queue, txID, payload string) {
		t.Helper()
		tag, err := c.Broker.Store().Pool().Exec(context.Background(), `
			UPDATE queen.segments s SET payloads[(m.seq - s.first_seq + 1)::int] = $3
			FROM queen.message_transactions m, queen.partitions p, queen.queues q
			WHERE s.partition_id = m.partition_id AND m.seq BETWEEN s.first_seq AND s.last_seq
			  AND p.id = m.partition_id AND q.id = p.queue_id AND q.name = $1 AND m.transaction_id = $2`, queue, txID, payload)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("cannot rewrite %s/%s: %v (%d rows)", queue, txID, err, tag.RowsAffected())
		}
	}
	stolen := storedRows(t, c, "bound-a")[0].Payload // message A's envelope
	setPayload("bound-a", "msg-b", stolen)
	setPayload("bound-b", "msg-c", stolen)
	setPayload("bound-a", "msg-e", legacyEnvelope(t, `{"secret":"MARKER-legacy"}`))

	var stolenEnv map[string]any
	if err := json.Unmarshal([]byte(stolen), &stolenEnv); err != nil {
		t.Fatal(err)
	}
	// checkMoved fails unless data is the moved envelope exactly as stored.
	checkMoved := func(who string, data json.RawMessage) {
		t.Helper()
		var got map[string]any
		if err := json.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(got, stolenEnv) {
			t.Fatalf("%s: data %s, want the moved envelope as stored %s", who, data, stolen)
		}
	}
	p := popWith(t, c, "/api/v1/pop/queue/bound-a", "batch", "10")
	if len(p.Messages) != 3 {
		t.Fatalf("pop bound-a: %d messages, want 3", len(p.Messages))
	}
	if got := string(p.Messages[0].Data); got != `{"secret":"MARKER-A"}` {
		t.Fatalf("message A: data %s, want it in clear", got)
	}
	checkMoved("A's envelope in message B", p.Messages[1].Data)
	if got := string(p.Messages[2].Data); got != `{"secret":"MARKER-legacy"}` {
		t.Fatalf("legacy envelope: data %s, want it in clear", got)
	}
	var detail struct {
		Payload json.RawMessage `json:"payload"`
	}
	c.JSON("GET", "/api/v1/messages/"+p.Messages[1].PartitionID+"/msg-b", nil, 200, &detail)
	checkMoved("message detail of B", detail.Payload)

	p = popWith(t, c, "/api/v1/pop/queue/bound-b", "batch", "10")
	if len(p.Messages) != 2 {
		t.Fatalf("pop bound-b: %d messages, want 2", len(p.Messages))
	}
	checkMoved("A's envelope in another queue's message C", p.Messages[0].Data)
	if got := string(p.Messages[1].Data); got != `{"secret":"MARKER-D"}` {
		t.Fatalf("message D: data %s, want it in clear", got)
	}
}
