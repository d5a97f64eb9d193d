package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"queen/persistence"
	"queen/seal"
)

// pgTLS builds the TLS configuration of the connections to PG_HOST from PG_USE_SSL,
// PG_SSL_REJECT_UNAUTHORIZED and PG_SSL_ROOT_CERT, and logs which of the modes is in force:
//
//   - plaintext: PG_USE_SSL=false (nil configuration);
//   - verify-full against the system roots, or against PG_SSL_ROOT_CERT alone when it is set
//     (the certificate chain and the host name are both checked);
//   - accept-any: PG_SSL_REJECT_UNAUTHORIZED=false without a CA, encrypted but unverified.
//
// There is no opportunistic mode: with PG_USE_SSL=true a server without TLS is an error.
func (b *Broker) pgTLS() (*tls.Config, error) {
	c := b.cfg
	if !c.PGUseSSL {
		if len(c.PGSSLRootCert) > 0 {
			b.log.Warn("PG_SSL_ROOT_CERT is set but PG_USE_SSL is not: the PostgreSQL connection is PLAINTEXT")
		}
		b.log.Info("config: postgres", append(pgServer(c), "use_ssl", false, "ssl_trust", "plaintext")...)
		return nil, nil
	}
	t := &tls.Config{ServerName: c.PGHost, MinVersion: tls.VersionTLS12}
	trust := "system-roots"
	if len(c.PGSSLRootCert) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.PGSSLRootCert) {
			return nil, fmt.Errorf("invalid PG_SSL_ROOT_CERT: holds no PEM-encoded CA certificate")
		}
		t.RootCAs, trust = pool, "supplied-ca"
		if !c.PGSSLRejectUnauthorized {
			b.log.Warn("PG_SSL_REJECT_UNAUTHORIZED=false is ignored because PG_SSL_ROOT_CERT is set: the server certificate is verified against that CA")
		}
	} else if !c.PGSSLRejectUnauthorized {
		t.InsecureSkipVerify, trust = true, "accept-any"
		b.log.Warn("PostgreSQL TLS is encrypted but UNVERIFIED (PG_SSL_REJECT_UNAUTHORIZED=false): the server's certificate is not checked, so anyone on the path can impersonate the database; set PG_SSL_ROOT_CERT to the server's CA instead")
	}
	b.log.Info("config: postgres", append(pgServer(c), "use_ssl", true,
		"ssl_reject_unauthorized", c.PGSSLRejectUnauthorized, "ssl_trust", trust, "ssl_verified", !t.InsecureSkipVerify)...)
	return t, nil
}

// checkPGTLS confirms that the pool's connections really are encrypted, and says so.
func (b *Broker) checkPGTLS(ctx context.Context) error {
	on, version, err := b.store.ConnectionTLS(ctx)
	if err != nil {
		hint := ""
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			hint = "; the server's certificate is not trusted: set PG_SSL_ROOT_CERT to the CA that signed it"
		}
		return fmt.Errorf("cannot connect to PostgreSQL at %s over TLS (PG_USE_SSL=true): %w%s", b.pgAddr(), err, hint)
	}
	if !on {
		return fmt.Errorf("the PostgreSQL connection to %s is not encrypted although PG_USE_SSL=true", b.pgAddr())
	}
	b.log.Info("PostgreSQL connection encrypted", "tls_version", version, "verified", !b.pgTLSConf.InsecureSkipVerify)
	return nil
}

func (b *Broker) pgAddr() string {
	return net.JoinHostPort(b.cfg.PGHost, strconv.Itoa(b.cfg.PGPort))
}

// startEncryption loads QUEEN_ENCRYPTION_KEY (already checked by config.Load) into the store and
// reads which queues are flagged encryptionEnabled; a goroutine keeps that set current.
func (b *Broker) startEncryption(ctx context.Context) error {
	if b.cfg.EncryptionKey != "" {
		k, err := seal.ParseKey(b.cfg.EncryptionKey)
		if err != nil {
			return fmt.Errorf("invalid %s: %w", seal.KeyVar, err)
		}
		b.sealKey = k
		b.store.SetSealer(k)
		b.log.Info("encryption service initialized (AES-256-GCM)")
	}
	b.encQueues = seal.NewQueues(b.store.EncryptedQueues, b.log.With("subsystem", "encryption"))
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := b.encQueues.Reload(lctx); err != nil {
		return err
	}
	if names := b.encQueues.Names(); b.sealKey == nil && len(names) > 0 {
		b.log.Warn("encryption DISABLED: QUEEN_ENCRYPTION_KEY is unset; pushes are refused (409) to the queues that require it: "+
			encryptedQueueList(names), "queues", len(names))
	} else if b.sealKey == nil {
		b.log.Info("payload encryption off: QUEEN_ENCRYPTION_KEY is unset (pushes to a queue configured with encryptionEnabled would be refused)")
	}
	rctx, stop := context.WithCancel(context.Background())
	b.stopEnc = stop
	go b.encQueues.Run(rctx, b.cfg.FlagsRefresh)
	return nil
}

// encryptedQueueList names queues for the boot log as an operator knows them (a tenant's queue
// as tenant/name), the first hundred of them.
func encryptedQueueList(stored []string) string {
	const most = 100
	shown := make([]string, 0, min(len(stored), most))
	for _, q := range stored[:min(len(stored), most)] {
		if tenant, name := persistence.SplitName(q); tenant != "" {
			q = tenant + "/" + name
		}
		shown = append(shown, q)
	}
	list := strings.Join(shown, ", ")
	if len(stored) > most {
		list += fmt.Sprintf(" and %d more", len(stored)-most)
	}
	return list
}

func (b *Broker) stopEncryption() {
	if b.stopEnc != nil {
		b.stopEnc()
	}
}

// listenMetrics opens QUEEN_METRICS_BIND_ADDR when it is set.
func (b *Broker) listenMetrics() error {
	if b.cfg.MetricsBindAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", b.cfg.MetricsBindAddr)
	if err != nil {
		return fmt.Errorf("cannot listen on QUEEN_METRICS_BIND_ADDR %s: %w", b.cfg.MetricsBindAddr, err)
	}
	b.metricsLn = ln
	return nil
}

// MetricsAddr is the metrics listener's address, "" when metrics share the HTTP listener.
func (b *Broker) MetricsAddr() string {
	if b.metricsLn == nil {
		return ""
	}
	return b.metricsLn.Addr().String()
}
