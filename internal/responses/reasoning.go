package responses

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// # Reasoning that round-trips
//
// A reasoning item's encrypted_content is the model's reasoning block
// (its text and Bedrock's signature) sealed with AES-256-GCM under the
// fleet's key (JETWAY_RESPONSES_REASONING_KEY, 32 bytes in base64). The
// nonce is the first 12 bytes of HMAC-SHA256(key, plaintext), so the same
// block seals to the same bytes on every server and every replay (a
// stream's events are encoded once and must be byte-identical on resume);
// what that reveals is only that two blocks are equal. A client passing
// the item back gives the model its reasoning again; one sealed under
// another key, or tampered with, is left out of the model call (the
// model continues without it). Sealed text is bounded by the answer it
// came from (a model's output tokens); a passed-back item over
// MaxEncryptedBytes is refused.

// MaxEncryptedBytes bounds one encrypted_content passed back.
const MaxEncryptedBytes = 512 << 10

const sealPrefix = "jw1."

// Keys seals and opens reasoning.
type Keys struct {
	aead cipher.AEAD
	mac  []byte
}

// NewKeys returns the keys for a 32-byte key; nil key: a random one (the
// reasoning then round-trips only through this process).
func NewKeys(key []byte) (*Keys, error) {
	if key == nil {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	if len(key) != 32 {
		return nil, errors.New("the reasoning key must be 32 bytes (base64)")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Keys{aead: aead, mac: key}, nil
}

// ParseKey reads JETWAY_RESPONSES_REASONING_KEY's value.
func ParseKey(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != 32 {
		return nil, errors.New("must be 32 bytes in base64 (openssl rand -base64 32)")
	}
	return b, nil
}

type sealed struct {
	Text      string `json:"t"`
	Signature string `json:"s"`
}

func (k *Keys) seal(text, signature string) string {
	plain, _ := json.Marshal(sealed{text, signature})
	m := hmac.New(sha256.New, k.mac)
	m.Write(plain)
	nonce := m.Sum(nil)[:k.aead.NonceSize()]
	out := k.aead.Seal(append([]byte(nil), nonce...), nonce, plain, nil)
	return sealPrefix + base64.RawURLEncoding.EncodeToString(out)
}

func (k *Keys) open(s string) (text, signature string, ok bool) {
	rest, found := strings.CutPrefix(s, sealPrefix)
	if !found || len(s) > MaxEncryptedBytes {
		return "", "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	n := k.aead.NonceSize()
	if err != nil || len(b) < n {
		return "", "", false
	}
	plain, err := k.aead.Open(nil, b[:n], b[n:], nil)
	if err != nil {
		return "", "", false
	}
	var v sealed
	if json.Unmarshal(plain, &v) != nil {
		return "", "", false
	}
	return v.Text, v.Signature, true
}
