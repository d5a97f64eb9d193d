package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"queen/background"
	"queen/config"
	"queen/persistence"
	"queen/seal"
	"queen/writer"
)

// encryption is payload encryption at rest: the key (nil without QUEEN_ENCRYPTION_KEY) and the
// set of queues flagged encryptionEnabled, which a goroutine keeps current.
type encryption struct {
	key    *seal.Key
	queues *writer.EncryptedQueues
	loop   *background.Group
}

// startEncryption loads QUEEN_ENCRYPTION_KEY (already checked by config.Load) into the store
// and reads which queues are flagged encryptionEnabled.
func startEncryption(ctx context.Context, cfg config.Config, store *persistence.Store, log *slog.Logger) (*encryption, error) {
	e := &encryption{}
	if cfg.EncryptionKey != nil {
		k, err := seal.NewKey(cfg.EncryptionKey)
		if err != nil {
			return nil, fmt.Errorf("invalid QUEEN_ENCRYPTION_KEY: %w", err)
		}
		e.key = k
		store.SetSealer(k)
		log.Info("encryption service initialized (AES-256-GCM)")
	}
	e.queues = writer.NewEncryptedQueues(store.EncryptedQueues, log.With("subsystem", "encryption"))
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.queues.Reload(lctx); err != nil {
		return nil, err
	}
	if names := e.queues.Names(); e.key == nil && len(names) > 0 {
		log.Warn("encryption DISABLED: QUEEN_ENCRYPTION_KEY is unset; pushes are refused (409) to the queues that require it: "+
			encryptedQueueList(names), "queues", len(names))
	} else if e.key == nil {
		log.Info("payload encryption off: QUEEN_ENCRYPTION_KEY is unset (pushes to a queue configured with encryptionEnabled would be refused)")
	}
	e.loop = background.NewGroup()
	e.queues.Start(e.loop, cfg.FlagsRefresh)
	return e, nil
}

// close stops the refresh and waits for it, so the pool can close under nothing.
func (e *encryption) close() { e.loop.Stop() }

// encryptedQueueList names queues for the boot log as an operator knows them (a tenant's queue
// as tenant/name), the first hundred of them.
func encryptedQueueList(queues []persistence.QueueName) string {
	const most = 100
	shown := make([]string, 0, min(len(queues), most))
	for _, q := range queues[:min(len(queues), most)] {
		shown = append(shown, q.String())
	}
	list := strings.Join(shown, ", ")
	if len(queues) > most {
		list += fmt.Sprintf(" and %d more", len(queues)-most)
	}
	return list
}
