package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// openaiDoor sends overhead requests to the gateway's OpenAI-compatible door
// (POST /v1/chat/completions, stream: true) over kept-alive HTTP connections,
// reading the Server-Sent Events itself so the client's cost stays as small
// as the WebSocket client's.
type openaiDoor struct {
	url    string
	hc     *http.Client
	tokens func(worker int) func(context.Context) (string, error) // nil: a peer, signed in by header
	header http.Header
	model  string
}

func newOpenAIDoor(s *settings, ts *tokenSource, users int) *openaiDoor {
	base := strings.Replace(strings.Replace(s.URL, "wss://", "https://", 1), "ws://", "http://", 1)
	base = strings.TrimSuffix(base, "/v1/ws")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(s.Streams, 2)
	return &openaiDoor{url: base + "/v1/chat/completions", hc: &http.Client{Transport: tr}, model: s.Model,
		tokens: func(w int) func(context.Context) (string, error) { return ts.forUser(s.user(w%users), w%users) }}
}

// newPeerDoor is a peer gateway's OpenAI-compatible endpoint at url
// (--compare-door openai): no JWT, the --peer-header headers on every
// request, the --peer-model (default --bedrock-model) in every body.
func newPeerDoor(url string, s *settings) *openaiDoor {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(s.Streams, 2)
	return &openaiDoor{url: url, hc: &http.Client{Transport: tr}, header: s.peerHeader(), model: s.peerModel()}
}

// peerHeader is the --peer-header headers.
func (s *settings) peerHeader() http.Header {
	h := http.Header{}
	for _, kv := range s.PeerHeader {
		k, v, _ := strings.Cut(kv, ":")
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

// peerModel is the model a peer's requests name: --peer-model, else --bedrock-model.
func (s *settings) peerModel() string {
	if s.PeerModel != "" {
		return s.PeerModel
	}
	return s.BedrockModel
}

// ask streams one answer, calling t.text at each content event.
func (d *openaiDoor) ask(ctx context.Context, worker int, prompt string, maxTokens int, t *timing) error {
	body, _ := json.Marshal(map[string]any{"model": d.model, "messages": []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": maxTokens, "stream": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range d.header {
		req.Header[k] = v
	}
	if d.tokens != nil {
		tok, err := d.tokens(worker)(ctx)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Content-Type", "application/json")
	t.start = time.Now()
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("openai door: HTTP %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("openai door: stream ended without [DONE]: %w", err)
		}
		switch {
		case bytes.HasPrefix(line, []byte("data: [DONE]")):
			_, _ = io.Copy(io.Discard, r) // read to the end so the connection is kept for the next request
			return nil
		case bytes.HasPrefix(line, []byte(`data: {"error"`)):
			return errors.New("openai door: error event")
		case bytes.HasPrefix(line, []byte("data: ")) && bytes.Contains(line, []byte(`"content":`)):
			t.text()
		}
	}
}
