package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are the PEM files of a test certificate authority, made by
// WriteCerts: a server certificate it signed for 127.0.0.1, ::1 and
// localhost, and a client certificate (for mutual TLS).
type Certs struct {
	CA         string // the authority's certificate
	ServerCert string // server certificate
	ServerKey  string // its private key (PKCS #8, unencrypted)
	// ServerKeystore holds the server's private key followed by its
	// certificate chain: a broker's keystore with ssl.keystore.type=PEM.
	ServerKeystore string
	ClientCert     string // client certificate, common name "ivrsched-test"
	ClientKey      string // its private key
}

// WriteCerts makes a new certificate authority and the certificates it
// signs, valid for a day, and writes them as PEM files into dir.
func WriteCerts(dir string) (Certs, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, fmt.Errorf("kafkatest: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kafkatest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Certs{}, fmt.Errorf("kafkatest: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Certs{}, fmt.Errorf("kafkatest: CA certificate: %w", err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, server bool) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, fmt.Errorf("kafkatest: %s key: %w", cn, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("kafkatest: %s certificate: %w", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, fmt.Errorf("kafkatest: %s key: %w", cn, err)
		}
		return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
	}
	serverCert, serverKey, err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth, true)
	if err != nil {
		return Certs{}, err
	}
	clientCert, clientKey, err := leaf(3, "ivrsched-test", x509.ExtKeyUsageClientAuth, false)
	if err != nil {
		return Certs{}, err
	}
	caPEM := pemBlock("CERTIFICATE", caDER)
	c := Certs{
		CA:             filepath.Join(dir, "ca.pem"),
		ServerCert:     filepath.Join(dir, "server-cert.pem"),
		ServerKey:      filepath.Join(dir, "server-key.pem"),
		ServerKeystore: filepath.Join(dir, "server-keystore.pem"),
		ClientCert:     filepath.Join(dir, "client-cert.pem"),
		ClientKey:      filepath.Join(dir, "client-key.pem"),
	}
	for path, data := range map[string][]byte{
		c.CA:             caPEM,
		c.ServerCert:     serverCert,
		c.ServerKey:      serverKey,
		c.ServerKeystore: append(append(append([]byte{}, serverKey...), serverCert...), caPEM...),
		c.ClientCert:     clientCert,
		c.ClientKey:      clientKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return Certs{}, fmt.Errorf("kafkatest: write %s: %w", path, err)
		}
	}
	return c, nil
}

// ServerTLS is the TLS configuration of a server that presents
// ServerCert (an in-process test broker, say).
func (c Certs) ServerTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(c.ServerCert, c.ServerKey)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: server certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
