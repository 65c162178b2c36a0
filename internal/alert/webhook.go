package alert

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/backoff"
)

// Sink names: the sink label of jetway_quota_alerts_total.
const (
	SinkWebhook = "webhook"
	SinkSNS     = "sns"
)

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body
// under the webhook's secret.
const SignatureHeader = "X-Jetway-Signature"

// Defaults of WebhookOptions (docs/configuration.md, "Quota alerts").
const (
	DefaultWebhookAttempts       = 4
	DefaultWebhookWithin         = 10 * time.Second
	DefaultWebhookAttemptTimeout = 5 * time.Second
	DefaultWebhookBase           = 500 * time.Millisecond
	DefaultWebhookMax            = 4 * time.Second
	// webhookDrain bounds what is read of an answer's body, so the
	// connection can be reused.
	webhookDrain = 4 << 10
)

var (
	// ErrWebhookURL: the webhook URL is not https, nor http on a loopback
	// host (localhost, 127.0.0.0/8, ::1).
	ErrWebhookURL = errors.New("alert: webhook URL must be https (http only on loopback)")
	// ErrWebhookSecret: a webhook needs a secret to sign its bodies.
	ErrWebhookSecret = errors.New("alert: webhook secret is empty")
)

// StatusError is a webhook's answer other than 2xx.
type StatusError struct{ Code int }

func (e *StatusError) Error() string { return fmt.Sprintf("webhook answered %d", e.Code) }

// Retryable reports whether the answer may change on a retry: 408, 429
// and 5xx. Any other 4xx (and a 3xx: redirects are not followed) is final.
func (e *StatusError) Retryable() bool {
	return e.Code == http.StatusRequestTimeout || e.Code == http.StatusTooManyRequests || e.Code >= 500
}

// WebhookOptions bound one delivery; zero values mean the defaults.
type WebhookOptions struct {
	// Attempts bounds the POSTs of one event, the first included
	// (DefaultWebhookAttempts).
	Attempts int
	// Within bounds one event's delivery, its retries and their waits
	// included (DefaultWebhookWithin).
	Within time.Duration
	// AttemptTimeout bounds one POST (DefaultWebhookAttemptTimeout).
	AttemptTimeout time.Duration
	// Base and Max are the retry waits' exponential base and cap, equal
	// jitter (DefaultWebhookBase, DefaultWebhookMax).
	Base, Max time.Duration
}

func (o WebhookOptions) withDefaults() WebhookOptions {
	if o.Attempts <= 0 {
		o.Attempts = DefaultWebhookAttempts
	}
	if o.Within <= 0 {
		o.Within = DefaultWebhookWithin
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultWebhookAttemptTimeout
	}
	if o.Base <= 0 {
		o.Base = DefaultWebhookBase
	}
	if o.Max <= 0 {
		o.Max = DefaultWebhookMax
	}
	return o
}

// Webhook is the Sink that POSTs each event, signed, to one URL.
type Webhook struct {
	url    string
	secret []byte
	client *http.Client
	o      WebhookOptions
}

// NewWebhook returns the webhook sink for rawURL (see ValidateWebhookURL),
// signing with secret (required). client (nil: a plain one) is copied
// with redirects turned off: a redirect would send the event where the
// URL check never looked.
func NewWebhook(rawURL, secret string, client *http.Client, o WebhookOptions) (*Webhook, error) {
	if err := ValidateWebhookURL(rawURL); err != nil {
		return nil, err
	}
	if secret == "" {
		return nil, ErrWebhookSecret
	}
	c := &http.Client{}
	if client != nil {
		*c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Webhook{url: rawURL, secret: []byte(secret), client: c, o: o.withDefaults()}, nil
}

// ValidateWebhookURL accepts an absolute https URL, or http whose host is
// loopback: "localhost" or a loopback IP. It returns ErrWebhookURL,
// wrapped with the reason, otherwise.
func ValidateWebhookURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWebhookURL, err)
	}
	host := u.Hostname()
	switch {
	case host == "":
		return fmt.Errorf("%w: no host", ErrWebhookURL)
	case u.Scheme == "https":
		return nil
	case u.Scheme != "http":
		return fmt.Errorf("%w: scheme %q", ErrWebhookURL, u.Scheme)
	case strings.EqualFold(host, "localhost"):
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: http to %s, which is not loopback", ErrWebhookURL, host)
}

// Name implements Sink.
func (w *Webhook) Name() string { return SinkWebhook }

// Sign is the SignatureHeader value for body under secret, as a receiver
// checks it: "sha256=" + hex(HMAC-SHA256(body, secret)).
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Send implements Sink: POST body (application/json, signed), retried on
// network errors, 408, 429 and 5xx, at most Attempts times within Within.
func (w *Webhook) Send(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.o.Within)
	defer cancel()
	sig := Sign(w.secret, body)
	p := backoff.Policy{Base: w.o.Base, Max: w.o.Max, Jitter: backoff.Equal, Attempts: w.o.Attempts}
	for n := 1; ; n++ {
		err := w.post(ctx, body, sig)
		var status *StatusError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &status) && !status.Retryable():
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("webhook: after %d attempts: %w", n, err)
		}
		if werr := p.Wait(ctx, n); werr != nil {
			return fmt.Errorf("webhook: after %d attempts: %w", n, err)
		}
	}
}

// post is one attempt.
func (w *Webhook) post(ctx context.Context, body []byte, sig string) error {
	ctx, cancel := context.WithTimeout(ctx, w.o.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "jetway-alerts")
	req.Header.Set(SignatureHeader, sig)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.CopyN(io.Discard, resp.Body, webhookDrain)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return &StatusError{Code: resp.StatusCode}
	}
	return nil
}
