// Package examplehelper is a small provisioning helper for the demo fleet and the tests: it reads
// the Choria Provisioner helper contract's input on stdin and prints a configuration that makes a
// server in provisioning mode a normal fleet member, in either security mode:
//   - Organization Issuer (ed25519): the provisioner signs the server JWT; the helper returns
//     the configuration and server_claims;
//   - pki: the helper signs the server's CSR with its CA (or, with SupplyKey, makes the key
//     itself and returns it for encrypted transport).
package examplehelper

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Options are the site facts the helper needs.
type Options struct {
	BrokerURL    string
	IssuerPublic string // ed25519 mode
	CACert       string // pki mode: the CA that signs CSRs
	CAKey        string
	SupplyKey    bool   // pki mode: make the server's key here and send it (encrypted) with configure
	Upgrade      string // ask for this server version first (features.upgrades)
	Policies     bool   // also send an action policy and an OPA policy
	SSLDirBase   string // pki without a CSR (jwt-only): servers keep their ssl in <base>/<identity>/ssl
	LogLevel     string
	// Refuse are identities the helper fails (exit non-zero, reason on stderr) while FixFile does
	// not exist: the `make run ARGS="--failing N"` demo of an operator finding, fixing and
	// retrying failed hosts.
	Refuse  []string
	FixFile string
}

// ErrRefused is the demo's refusal of a host in Options.Refuse.
var ErrRefused = errors.New("the demo CA has not approved this host")

type input struct {
	Identity      string `json:"identity"`
	ED25519PubKey *struct {
		PublicKey string `json:"public_key"`
		Directory string `json:"directory"`
	} `json:"ed25519_pubkey"`
	CSR *struct {
		CSR    string `json:"csr"`
		SSLDir string `json:"ssldir"`
	} `json:"csr"`
	Inventory string `json:"inventory"`
}

// Run reads one request from in and writes one reply to out.
func Run(o Options, in io.Reader, out io.Writer) error {
	var req input
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("decoding request: %w", err)
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if err := refused(o, req.Identity); err != nil {
		return err
	}
	var reply map[string]any
	var err error
	switch {
	case req.CSR == nil && o.CACert != "" && o.SupplyKey && o.SSLDirBase != "":
		// jwt-only: no CSR, so the helper makes the key and names where it goes
		req.CSR = &struct {
			CSR    string `json:"csr"`
			SSLDir string `json:"ssldir"`
		}{SSLDir: filepath.Join(o.SSLDirBase, req.Identity, "ssl")}
		reply, err = pkiReply(o, req)
		if err == nil {
			reply["ssldir"] = req.CSR.SSLDir
		}
	case req.CSR != nil && o.CACert != "":
		reply, err = pkiReply(o, req)
	case req.ED25519PubKey != nil && req.ED25519PubKey.Directory != "":
		reply = issuerReply(o, req)
	default:
		reply = map[string]any{"defer": true, "msg": "neither an ed25519 key nor a CSR (with a CA to sign it) in the request"}
	}
	if err != nil {
		return err
	}
	if o.Upgrade != "" && reply["defer"] != true {
		reply["upgrade"] = o.Upgrade
	}
	if o.Policies && reply["defer"] != true {
		reply["action_policies"] = map[string]string{"rpcutil.policy": "policy default allow\n"}
		reply["opa_policies"] = map[string]string{"default.rego": "package io.choria.aaasvc\n\ndefault allow = true\n"}
	}
	return json.NewEncoder(out).Encode(reply)
}

func baseConfig(o Options, identity, dir string) map[string]string {
	return map[string]string{
		"identity":                       identity,
		"loglevel":                       o.LogLevel,
		"logfile":                        filepath.Join(dir, "server.log"),
		"plugin.choria.server.provision": "false",
		"plugin.choria.middleware_hosts": o.BrokerURL,
		"plugin.choria.use_srv":          "false",
		"rpcauthorization":               "0",
		"plugin.choria.status_file_path": filepath.Join(dir, "status.json"),
	}
}

func issuerReply(o Options, req input) map[string]any {
	dir := req.ED25519PubKey.Directory
	conf := baseConfig(o, req.Identity, dir)
	conf["collectives"] = "choria"
	conf["main_collective"] = "choria"
	conf["plugin.security.provider"] = "choria"
	conf["plugin.security.issuer.names"] = "choria"
	conf["plugin.security.issuer.choria.public"] = o.IssuerPublic
	conf["plugin.security.choria.token_file"] = filepath.Join(dir, "server.jwt")
	conf["plugin.security.choria.seed_file"] = filepath.Join(dir, "server.seed")
	return map[string]any{
		"defer": false, "msg": "configured by the example helper",
		"configuration": conf,
		"server_claims": map[string]any{"collectives": []string{"choria"}},
	}
}

func pkiReply(o Options, req input) (map[string]any, error) {
	ca, caKey, caPEM, err := loadCA(o.CACert, o.CAKey)
	if err != nil {
		return nil, err
	}
	ssldir := req.CSR.SSLDir
	reply := map[string]any{"defer": false, "msg": "certificate issued by the example helper's CA", "ca": string(caPEM)}
	var pub any
	if o.SupplyKey {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		pub = &key.PublicKey
		reply["key"] = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	} else {
		block, _ := pem.Decode([]byte(req.CSR.CSR))
		if block == nil {
			return nil, errors.New("the CSR is not PEM")
		}
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, err
		}
		pub = csr.PublicKey
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: req.Identity}, DNSNames: []string{req.Identity},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return nil, err
	}
	reply["certificate"] = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	dir := filepath.Dir(ssldir)
	conf := baseConfig(o, req.Identity, dir)
	conf["plugin.security.provider"] = "file"
	conf["plugin.security.file.certificate"] = filepath.Join(ssldir, "certificate.pem")
	conf["plugin.security.file.key"] = filepath.Join(ssldir, "private.pem")
	conf["plugin.security.file.ca"] = filepath.Join(ssldir, "ca.pem")
	reply["configuration"] = conf
	return reply, nil
}

func loadCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile) // parses both PEMs and checks they match
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, nil, errors.New("CA key is not ECDSA")
	}
	caPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, nil, err
	}
	return pair.Leaf, key, caPEM, nil
}

// refused fails an identity of o.Refuse until the operator creates o.FixFile.
func refused(o Options, identity string) error {
	if !slices.Contains(o.Refuse, identity) {
		return nil
	}
	if o.FixFile == "" {
		return fmt.Errorf("%w: %s (no fix file configured)", ErrRefused, identity)
	}
	if _, err := os.Stat(o.FixFile); err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s; to approve it: touch %s (then: choria-provisioner hosts retry --failed)", ErrRefused, identity, o.FixFile)
}
