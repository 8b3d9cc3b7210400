package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// pki is a throwaway CA and a server certificate for localhost and
// 127.0.0.1 that it signed; CAFile is the CA in PEM.
type pki struct {
	CAFile string
	Server tls.Certificate
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "msgpulse test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	return pki{CAFile: caFile, Server: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}}
}

// tlsProxy terminates TLS in front of a plain-text service (RabbitMQ,
// Redis on this machine), as a TLS listener of the service itself would.
func tlsProxy(t *testing.T, cert tls.Certificate, upstream string) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// smtpSink is an SMTP server backend that counts the messages it accepts.
type smtpSink struct{ n atomic.Int32 }

func (s *smtpSink) NewSession(*smtp.Conn) (smtp.Session, error) { return sinkSession{s}, nil }
func (s *smtpSink) count() int                                  { return int(s.n.Load()) }

type sinkSession struct{ s *smtpSink }

func (sinkSession) Reset()                               {}
func (sinkSession) Logout() error                        { return nil }
func (sinkSession) Mail(string, *smtp.MailOptions) error { return nil }
func (sinkSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (x sinkSession) Data(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	x.s.n.Add(1)
	return err
}

// smtpServers starts an implicit-TLS server and a STARTTLS server, both
// with the test CA's certificate, counting into sink.
func smtpServers(t *testing.T, p pki, sink *smtpSink) (implicit, starttls string) {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{p.Server}, MinVersion: tls.VersionTLS12}
	serve := func(ln net.Listener, starttls *tls.Config) string {
		srv := smtp.NewServer(sink)
		srv.Domain = "localhost"
		srv.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
		srv.TLSConfig = starttls                  // set: the server offers STARTTLS
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	tl, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serve(tl, nil), serve(pl, cfg)
}

// tlsEnv is what the child process needs to know.
const (
	envChild    = "MSGPULSE_TLS_CHILD"
	envAMQPS    = "MSGPULSE_TLS_AMQPS"
	envRediss   = "MSGPULSE_TLS_REDISS"
	envImplicit = "MSGPULSE_TLS_SMTP_IMPLICIT"
	envStartTLS = "MSGPULSE_TLS_SMTP_STARTTLS"
)

func amqpsURL(t *testing.T, b *testenv.Broker, addr string, query url.Values) string {
	t.Helper()
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	u.Scheme, u.Host, u.RawQuery = "amqps", "localhost:"+port, query.Encode()
	return u.String()
}

func sendMail(t *testing.T, addr string, mode mail.TLSMode) error {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	cfg := mail.DefaultConfig()
	cfg.Host, cfg.TLS, cfg.From, cfg.Timeout = "localhost", mode, "msgpulse <no-reply@msgpulse.test>", 5*time.Second
	cfg.Port, err = strconv.Atoi(port)
	require.NoError(t, err)
	m, err := mail.New(cfg, zap.NewNop())
	require.NoError(t, err)
	defer func() { _ = m.Close() }()
	_, err = m.SendMail(testenv.Context(t, 10*time.Second), provider.Mail{To: "tls@example.com", Subject: "tls", Text: "over TLS", TaskID: "tls-1"})
	return err
}

func isUnknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	var ve *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &ve)
}

// amqps://, rediss:// and SMTP TLS (implicit and STARTTLS) against servers
// whose certificate a private CA signed. Without trusting the CA every
// client refuses the server; the CA is trusted per URL for AMQP
// (?cacertfile=), and for every client at once by SSL_CERT_FILE (Go's
// standard way, checked in a child process since the roots load once).
// Redis's skip_verify=true (development only) is the one way around
// verification, and it is explicit.
func TestTLSToBrokerRedisAndSMTP(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	b := testenv.NewBroker(t)
	amqpAddr := tlsProxy(t, p.Server, hostOf(t, testenv.AMQPBase))
	redisAddr := tlsProxy(t, p.Server, hostOf(t, testenv.RedisURL))
	sink := &smtpSink{}
	implicit, starttls := smtpServers(t, p, sink)
	_, redisPort, err := net.SplitHostPort(redisAddr)
	require.NoError(t, err)
	rediss := "rediss://localhost:" + redisPort + "/0"

	t.Run("not trusted: every client refuses the server", func(t *testing.T) {
		_, err := broker.Dial(testenv.Context(t, 10*time.Second), broker.Config{URL: amqpsURL(t, b, amqpAddr, nil)})
		require.Error(t, err)
		require.True(t, isUnknownAuthority(err), "%v", err)
		c, err := rdb.New(rediss)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		err = c.Ping(testenv.Context(t, 10*time.Second)).Err()
		require.Error(t, err)
		require.True(t, isUnknownAuthority(err), "%v", err)
		for _, tc := range []struct {
			addr string
			mode mail.TLSMode
		}{{implicit, mail.TLSImplicit}, {starttls, mail.TLSStartTLS}} {
			err := sendMail(t, tc.addr, tc.mode)
			var pe *provider.Error
			require.ErrorAs(t, err, &pe, tc.mode)
			require.Equal(t, provider.Permanent, pe.Class, "%s: an untrusted certificate is a configuration error: %v", tc.mode, err)
		}
		require.Zero(t, sink.count())
	})

	t.Run("amqps with cacertfile in the URL", func(t *testing.T) {
		conn, err := broker.Dial(testenv.Context(t, 10*time.Second), broker.Config{URL: amqpsURL(t, b, amqpAddr, url.Values{"cacertfile": {p.CAFile}})})
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		require.True(t, conn.ConnectionState().HandshakeComplete)
		ch, err := conn.Channel()
		require.NoError(t, err)
		require.NoError(t, ch.Close())
	})

	t.Run("rediss with skip_verify", func(t *testing.T) {
		c, err := rdb.New(rediss + "?skip_verify=true")
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		require.NoError(t, c.Ping(testenv.Context(t, 10*time.Second)).Err())
	})

	t.Run("SSL_CERT_FILE trusts the CA for all three", func(t *testing.T) {
		before := sink.count()
		cmd := exec.CommandContext(testenv.Context(t, 60*time.Second), os.Args[0], "-test.run=^TestTLSChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+p.CAFile, "SSL_CERT_DIR="+t.TempDir(), envChild+"=1",
			envAMQPS+"="+amqpsURL(t, b, amqpAddr, nil), envRediss+"="+rediss, envImplicit+"="+implicit, envStartTLS+"="+starttls)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestTLSChild")
		require.Equal(t, before+2, sink.count(), "two mails over TLS")
	})
}

// TestTLSChild is TestTLSToBrokerRedisAndSMTP's child process: it runs
// only with SSL_CERT_FILE naming the test CA, and connects with the
// default TLS settings of every client.
func TestTLSChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("runs as a child of TestTLSToBrokerRedisAndSMTP")
	}
	conn, err := broker.Dial(testenv.Context(t, 10*time.Second), broker.Config{URL: os.Getenv(envAMQPS)})
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	c, err := rdb.New(os.Getenv(envRediss))
	require.NoError(t, err)
	require.NoError(t, c.Ping(testenv.Context(t, 10*time.Second)).Err())
	require.NoError(t, c.Close())
	require.NoError(t, sendMail(t, os.Getenv(envImplicit), mail.TLSImplicit))
	require.NoError(t, sendMail(t, os.Getenv(envStartTLS), mail.TLSStartTLS))
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}
