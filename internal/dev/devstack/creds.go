package devstack

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
)

// Credentials are the files of an Organization Issuer (ed25519) Choria network, generated fresh for
// every state directory so that no key is ever committed.
type Credentials struct {
	Dir  string
	Mode string // ModeIssuer or ModePKI
	PKI  *PKIFiles

	IssuerSeed   string // hex ed25519 seed of the Organization Issuer
	IssuerPublic string // hex public key, what jwt_verify_cert and the broker trust

	BrokerCert string // self-signed TLS certificate for 127.0.0.1/localhost
	BrokerKey  string
	BrokerJWT  string
	BrokerSeed string

	// The provisioner's client identity: a chain issuer with the server-provisioner right, so it
	// can both connect to the provisioning account and sign server JWTs that chain to the issuer.
	ProvisionerJWT  string
	ProvisionerSeed string

	ProvisioningJWT string // what each unprovisioned server holds

	// An administrator of the provisioned fleet (choria account), for reprovision and inspection.
	AdminJWT  string
	AdminSeed string

	Token                string // provisioning token inside ProvisioningJWT
	ProvisioningPassword string // broker provisioning account password
}

// ProvisionerCallerID is the Choria caller every provisioner worker presents; the provisioning lock
// on a server admits one caller, so replicas must share it.
const ProvisionerCallerID = "provisioner_signer"

// LoadOrCreateCredentials makes the credentials in dir unless they exist already; brokerURL goes
// into the provisioning JWT so servers know where to connect. The broker certificate is for
// localhost and 127.0.0.1, plus brokerHosts (names the broker has in a container network).
func LoadOrCreateCredentials(dir string, brokerURL string, brokerHosts ...string) (*Credentials, error) {
	c := &Credentials{
		Dir:             dir,
		Mode:            ModeIssuer,
		IssuerSeed:      filepath.Join(dir, "issuer.seed"),
		BrokerCert:      filepath.Join(dir, "broker-cert.pem"),
		BrokerKey:       filepath.Join(dir, "broker-key.pem"),
		BrokerJWT:       filepath.Join(dir, "broker.jwt"),
		BrokerSeed:      filepath.Join(dir, "broker.seed"),
		ProvisionerJWT:  filepath.Join(dir, "provisioner.jwt"),
		ProvisionerSeed: filepath.Join(dir, "provisioner.seed"),
		ProvisioningJWT: filepath.Join(dir, "provisioning.jwt"),
		AdminJWT:        filepath.Join(dir, "admin.jwt"),
		AdminSeed:       filepath.Join(dir, "admin.seed"),
	}
	secretsFile := filepath.Join(dir, "secrets")

	if _, err := os.Stat(c.ProvisioningJWT); err == nil {
		return c, c.loadSecrets(secretsFile)
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating credentials directory: %w", err)
	}

	c.Token = randomHex(16)
	c.ProvisioningPassword = randomHex(16)
	if err := os.WriteFile(secretsFile, []byte(c.Token+"\n"+c.ProvisioningPassword+"\n"), 0o600); err != nil {
		return nil, err
	}

	issuerPub, issuerPri, err := writeSeed(c.IssuerSeed)
	if err != nil {
		return nil, err
	}
	c.IssuerPublic = hex.EncodeToString(issuerPub)
	if err := os.WriteFile(filepath.Join(dir, "issuer.public"), []byte(c.IssuerPublic), 0o644); err != nil {
		return nil, err
	}

	if err := writeSelfSignedCert(c.BrokerCert, c.BrokerKey, brokerHosts); err != nil {
		return nil, fmt.Errorf("broker certificate: %w", err)
	}

	brokerPub, _, err := writeSeed(c.BrokerSeed)
	if err != nil {
		return nil, err
	}
	bclaims, err := tokens.NewServerClaims("broker.local", []string{"choria"}, "choria", nil, nil, brokerPub, "", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := signTo(bclaims, issuerPri, c.BrokerJWT); err != nil {
		return nil, err
	}

	provPub, _, err := writeSeed(c.ProvisionerSeed)
	if err != nil {
		return nil, err
	}
	perms := &tokens.ClientPermissions{ServerProvisioner: true, FleetManagement: true, EventsViewer: true, ExtendedServiceLifetime: true}
	pclaims, err := tokens.NewClientIDClaims(ProvisionerCallerID, nil, "choria", nil, "", "", 5*365*24*time.Hour, perms, provPub)
	if err != nil {
		return nil, err
	}
	if err := pclaims.AddOrgIssuerData(issuerPri); err != nil {
		return nil, fmt.Errorf("chain data for provisioner token: %w", err)
	}
	if err := signTo(pclaims, issuerPri, c.ProvisionerJWT); err != nil {
		return nil, err
	}

	adminPub, _, err := writeSeed(c.AdminSeed)
	if err != nil {
		return nil, err
	}
	aclaims, err := tokens.NewClientIDClaims("admin", []string{"*"}, "choria", nil, "", "", 5*365*24*time.Hour,
		&tokens.ClientPermissions{FleetManagement: true, EventsViewer: true, ExtendedServiceLifetime: true}, adminPub)
	if err != nil {
		return nil, err
	}
	if err := signTo(aclaims, issuerPri, c.AdminJWT); err != nil {
		return nil, err
	}

	return c, c.SetBrokerURL(brokerURL)
}

// SetBrokerURL signs the provisioning JWT again for a broker at brokerURL: the servers find the
// broker through it, so a broker that lost its port to another process and moved to a new one
// needs a new JWT before any server starts.
func (c *Credentials) SetBrokerURL(brokerURL string) error {
	prov, err := tokens.NewProvisioningClaims(c.Mode != ModePKI, true, c.Token, "", "", []string{brokerURL}, "", "", "", "choria", "", 5*365*24*time.Hour)
	if err != nil {
		return err
	}
	prov.AllowUpdate = true // servers accept release_update (only with the provisioning token)
	if c.Mode == ModePKI {
		// protocol v1, insecure provisioning as Choria does it, signed by the RSA signer
		signer, err := readRSAKey(c.PKI.SignerKey)
		if err != nil {
			return err
		}
		signed, err := tokens.SignToken(prov, signer)
		if err != nil {
			return err
		}
		return os.WriteFile(c.ProvisioningJWT, []byte(signed), 0o600)
	}
	prov.ProtoV2 = true
	seed, err := os.ReadFile(c.IssuerSeed)
	if err != nil {
		return err
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(seed)))
	if err != nil || len(raw) != ed25519.SeedSize {
		return fmt.Errorf("%s holds no ed25519 seed", c.IssuerSeed)
	}
	return signTo(prov, ed25519.NewKeyFromSeed(raw), c.ProvisioningJWT)
}

func (c *Credentials) loadSecrets(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var tok, pass string
	if _, err := fmt.Sscanf(string(b), "%s\n%s\n", &tok, &pass); err != nil {
		return fmt.Errorf("parsing %s: %w", file, err)
	}
	c.Token, c.ProvisioningPassword = tok, pass
	pub, err := os.ReadFile(filepath.Join(c.Dir, "issuer.public"))
	if err != nil {
		return err
	}
	c.IssuerPublic = string(pub)
	return nil
}

func signTo(claims jwt.Claims, key ed25519.PrivateKey, file string) error {
	signed, err := tokens.SignToken(claims, key)
	if err != nil {
		return fmt.Errorf("signing %s: %w", filepath.Base(file), err)
	}
	return os.WriteFile(file, []byte(signed), 0o600)
}

func writeSeed(file string) (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, pri, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(file, []byte(hex.EncodeToString(pri.Seed())), 0o600); err != nil {
		return nil, nil, err
	}
	return pub, pri, nil
}

func writeSelfSignedCert(certFile, keyFile string, hosts []string) error {
	pub, pri, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              append([]string{"localhost"}, hosts...),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, pri)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(pri)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// BrokerSecurity is the broker configuration's security section.
func (c *Credentials) BrokerSecurity() string {
	if c.Mode == ModePKI {
		return fmt.Sprintf(`plugin.security.provider = file
plugin.security.file.certificate = %s
plugin.security.file.key = %s
plugin.security.file.ca = %s
plugin.choria.network.provisioning.signer_cert = %s
`, c.BrokerCert, c.BrokerKey, c.PKI.CACert, c.PKI.SignerPublic)
	}
	return fmt.Sprintf(`plugin.security.provider = choria
plugin.security.choria.certificate = %s
plugin.security.choria.key = %s
plugin.security.choria.token_file = %s
plugin.security.choria.seed_file = %s
plugin.security.issuer.names = choria
plugin.security.issuer.choria.public = %s
`, c.BrokerCert, c.BrokerKey, c.BrokerJWT, c.BrokerSeed, c.IssuerPublic)
}

// ClientSecurity is a Choria client configuration's security section; admin selects the fleet
// administrator instead of the provisioner.
func (c *Credentials) ClientSecurity(admin bool) string {
	if c.Mode == ModePKI {
		cert, key := c.PKI.ProvisionerCert, c.PKI.ProvisionerKey
		if admin {
			cert, key = c.PKI.AdminCert, c.PKI.AdminKey
		}
		return fmt.Sprintf(`plugin.security.provider = file
plugin.security.file.certificate = %s
plugin.security.file.key = %s
plugin.security.file.ca = %s
`, cert, key, c.PKI.CACert)
	}
	token, seed := c.ProvisionerJWT, c.ProvisionerSeed
	if admin {
		token, seed = c.AdminJWT, c.AdminSeed
	}
	return fmt.Sprintf(`plugin.security.provider = choria
plugin.security.choria.token_file = %s
plugin.security.choria.seed_file = %s
plugin.security.choria.ca = %s
plugin.security.issuer.names = choria
plugin.security.issuer.choria.public = %s
`, token, seed, c.BrokerCert, c.IssuerPublic)
}
