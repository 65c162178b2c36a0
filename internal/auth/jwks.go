package auth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/lestrrat-go/jwx/v2/jwk"
)

// jwksGetter is the HTTP client handed to jwk.Cache. The cache's interface has
// no context, so the getter carries the cache's: a fetch in flight ends with
// it. The body is read (bounded) and closed here, because the jwk transform
// neither closes it nor reads it on a non-200 answer.
type jwksGetter struct {
	ctx context.Context
	v   *Verifier
}

func (g jwksGetter) Get(u string) (*http.Response, error) {
	res, body, err := g.v.get(g.ctx, u)
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// fetchSet fetches and parses the JWKS.
func (v *Verifier) fetchSet(ctx context.Context) (jwk.Set, error) {
	_, body, err := v.get(ctx, v.cfg.JWKSURL)
	if err != nil {
		return nil, err
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return nil, fmt.Errorf("parse JWKS from %s: %w", v.cfg.JWKSURL, err)
	}
	return set, nil
}

// get fetches u, returning the response (body already consumed and closed)
// and its body. Non-200 answers are errors.
func (v *Verifier) get(ctx context.Context, u string) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, JWKSFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := v.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: read body: %w", u, err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, nil, fmt.Errorf("GET %s: body over %d bytes", u, MaxJWKSBytes)
	}
	if res.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %s", u, res.Status)
	}
	return res, body, nil
}
