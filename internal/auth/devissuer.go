package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// Dev issuer constants.
const (
	// DevKeyBits is the size of the RSA key the dev issuer creates.
	DevKeyBits = 2048
	// DefaultMintTTL is the lifetime of a minted token when MintOptions.TTL is 0.
	DefaultMintTTL = time.Hour
	// cognitoAccessScope is the scope Cognito puts in every access token
	// issued through its hosted APIs.
	cognitoAccessScope = "aws.cognito.signin.user.admin"
)

// DevIssuer stands in for a Cognito user pool in dev mode: it signs tokens
// shaped exactly like Cognito's with an RSA key kept in a PEM file, so a
// separate process (the token CLI) can mint tokens the server accepts.
type DevIssuer struct {
	issuer string
	key    jwk.Key // private, with kid and alg
	pub    jwk.Key
}

// MintOptions describes a token to mint.
type MintOptions struct {
	// Subject is the user's sub; required.
	Subject string
	// Username is the Cognito user name; default Subject.
	Username string
	// Tenant is put where Cognito would carry it: the group "tenant:<t>" in
	// an access token, the custom:tenant attribute in an id token. Empty
	// mints a token without a tenant.
	Tenant string
	// ClientID is the app client the token is issued to; required.
	ClientID string
	// TokenUse is "access" (default) or "id".
	TokenUse string
	// TTL is the token's lifetime; default DefaultMintTTL.
	TTL time.Duration
	// Groups are more cognito:groups entries (admin roles: jetway:admin,
	// jetway:admin:<tenant>).
	Groups []string
}

// LoadOrCreateDevIssuer returns a dev issuer named issuer whose RSA key is the
// PEM file at keyPath. A missing file is created (directories 0700, file
// 0600); an existing one is reused, so every process that loads the same
// path signs with the same key.
func LoadOrCreateDevIssuer(keyPath, issuer string) (*DevIssuer, error) {
	if issuer == "" {
		return nil, errors.New("auth: dev issuer: empty issuer")
	}
	priv, err := loadOrCreateKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("auth: dev issuer key %s: %w", keyPath, err)
	}
	key, err := jwk.FromRaw(priv)
	if err != nil {
		return nil, fmt.Errorf("auth: dev issuer key %s: %w", keyPath, err)
	}
	pub, err := jwk.PublicKeyOf(key)
	if err != nil {
		return nil, fmt.Errorf("auth: dev issuer key %s: %w", keyPath, err)
	}
	// The kid is the public key's RFC 7638 thumbprint: stable across
	// processes and restarts, different for every key.
	if err := jwk.AssignKeyID(pub); err != nil {
		return nil, fmt.Errorf("auth: dev issuer key %s: %w", keyPath, err)
	}
	for _, k := range []jwk.Key{key, pub} {
		if err := errors.Join(
			k.Set(jwk.KeyIDKey, pub.KeyID()),
			k.Set(jwk.AlgorithmKey, jwa.RS256),
			k.Set(jwk.KeyUsageKey, jwk.ForSignature),
		); err != nil {
			return nil, fmt.Errorf("auth: dev issuer key %s: %w", keyPath, err)
		}
	}
	return &DevIssuer{issuer: issuer, key: key, pub: pub}, nil
}

// Issuer returns the issuer URL put in every token's iss.
func (d *DevIssuer) Issuer() string { return d.issuer }

// KeyID returns the kid of the signing key.
func (d *DevIssuer) KeyID() string { return d.pub.KeyID() }

// KeySet returns a new set holding the public verification key, for
// Config.KeySet. Treat the key in it as read-only.
func (d *DevIssuer) KeySet() jwk.Set {
	set := jwk.NewSet()
	_ = set.AddKey(d.pub) // cannot fail: a new set, one key
	return set
}

// Mint signs a token shaped like Cognito's access or id token.
func (d *DevIssuer) Mint(o MintOptions) (string, error) {
	if o.Subject == "" || o.ClientID == "" {
		return "", errors.New("auth: mint: Subject and ClientID are required")
	}
	if o.Username == "" {
		o.Username = o.Subject
	}
	if o.TTL <= 0 {
		o.TTL = DefaultMintTTL
	}
	now := time.Now()
	claims := map[string]any{
		"sub":       o.Subject,
		"iss":       d.issuer,
		"auth_time": now.Unix(),
		"iat":       now.Unix(),
		"exp":       now.Add(o.TTL).Unix(),
	}
	switch o.TokenUse {
	case "", "access":
		claims["token_use"] = "access"
		claims["client_id"] = o.ClientID
		claims["scope"] = cognitoAccessScope
		claims["jti"] = uuid.NewString()
		claims["username"] = o.Username
		groups := append([]string(nil), o.Groups...)
		if o.Tenant != "" {
			groups = append([]string{DefaultTenantGroupPrefix + o.Tenant}, groups...)
		}
		if len(groups) > 0 {
			claims["cognito:groups"] = groups
		}
	case "id":
		claims["token_use"] = "id"
		claims["aud"] = o.ClientID
		claims["cognito:username"] = o.Username
		claims["email_verified"] = true
		if o.Tenant != "" {
			claims[DefaultTenantClaim] = o.Tenant
		}
	default:
		return "", fmt.Errorf("auth: mint: token use %q is neither access nor id", o.TokenUse)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("auth: mint: %w", err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, d.pub.KeyID()); err != nil {
		return "", fmt.Errorf("auth: mint: %w", err)
	}
	tok, err := jws.Sign(payload, jws.WithKey(jwa.RS256, d.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("auth: mint: sign: %w", err)
	}
	return string(tok), nil
}

// loadOrCreateKey reads the RSA key at path, or creates it. Creation writes
// a temporary file and links it into place, so a concurrent loader never
// reads half a key and two creators agree on one.
func loadOrCreateKey(path string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		return parseKey(data)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	priv, err := rsa.GenerateKey(rand.Reader, DevKeyBits)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".devkey-*") // mode 0600
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	werr := pem.Encode(tmp, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another process won the race: use its key.
			return loadOrCreateKey(path)
		}
		// Hard links are not everywhere; a rename is atomic too.
		if err := os.Rename(tmp.Name(), path); err != nil {
			return nil, err
		}
	}
	return priv, nil
}

func parseKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, err
	}
	priv, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%T is not an RSA key", key)
	}
	if bits := priv.N.BitLen(); bits < DevKeyBits {
		return nil, fmt.Errorf("RSA key of %d bits; at least %d required", bits, DevKeyBits)
	}
	return priv, nil
}
