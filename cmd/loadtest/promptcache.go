package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// Cache modes of the promptcache scenario: the app with prompt_cache auto
// (--app) and the one with off (--compare-app).
const (
	cacheAuto = "auto"
	cacheOff  = "off"
)

// PromptCacheResult is the promptcache scenario: one conversation per door
// and mode, turn by turn.
type PromptCacheResult struct {
	Turns        int `json:"turns"`
	SystemTokens int `json:"system_tokens"`
	// Prices are USD per 1,000 tokens: input, output, cache read, cache write.
	Prices      [4]float64           `json:"prices_per_1k"`
	Runs        []*CacheRun          `json:"runs"`
	Comparisons []CacheComparison    `json:"comparisons"`
	byKey       map[string]*CacheRun // door/mode
}

// CacheRun is one conversation.
type CacheRun struct {
	Door  string      `json:"door"`
	Mode  string      `json:"mode"`
	App   string      `json:"app"`
	Turns []CacheTurn `json:"turns"`
	// Sums over the conversation. FullPriceInput is the input billed at
	// the input price; InputCostUSD is every input token at its price.
	FullPriceInput int64   `json:"full_price_input_tokens"`
	CacheRead      int64   `json:"cache_read_input_tokens"`
	CacheWrite     int64   `json:"cache_write_input_tokens"`
	Output         int64   `json:"output_tokens"`
	InputCostUSD   float64 `json:"input_cost_usd"`
	CostUSD        float64 `json:"cost_usd"`
	// MedianTTFTFrom3 is the median client TTFT of turns 3 and later.
	MedianTTFTFrom3 float64 `json:"median_ttft_from_turn_3_ms"`
	Err             string  `json:"error,omitempty"`
}

// CacheTurn is one turn's usage, price and time to first token.
type CacheTurn struct {
	Turn           int     `json:"turn"`
	FullPriceInput int64   `json:"full_price_input_tokens"`
	CacheRead      int64   `json:"cache_read_input_tokens"`
	CacheWrite     int64   `json:"cache_write_input_tokens"`
	Output         int64   `json:"output_tokens"`
	CostUSD        float64 `json:"cost_usd"`
	TTFTMs         float64 `json:"ttft_ms"`
	text           string
}

// CacheComparison is auto against off through one door.
type CacheComparison struct {
	Door string `json:"door"`
	// InputCostSaving and CostSaving are (off - auto) / off, in %.
	InputCostSaving, CostSaving   float64
	MedianTTFTOff, MedianTTFTAuto float64
	SameAnswers                   bool
}

// promptCacheDoors are the doors the scenario can drive.
var promptCacheDoors = []string{"ws", "openai"}

// promptCache runs a --turns conversation with a --system-tokens system
// prompt through each door of --doors, once on --app (prompt_cache auto)
// and once on --compare-app (off), all side by side.
func (e *env) promptCache(ctx context.Context) (*Report, error) {
	s := e.s
	off := *s
	off.App = s.CompareApp
	offTokens, err := newTokenSource(&off)
	if err != nil {
		return nil, err
	}
	res := &PromptCacheResult{Turns: s.Turns, SystemTokens: s.SystemTokens, byKey: map[string]*CacheRun{},
		Prices: [4]float64{s.PriceInput, s.PriceOutput, s.PriceCacheRead, s.PriceCacheWrite}}
	start := time.Now()
	e.run = start.UTC().Format("20060102T150405.000")
	var wg sync.WaitGroup
	bar := e.progress.bar(int64(len(s.Doors)*2*s.Turns), "conversations")
	defer bar.finish()
	for i, door := range s.Doors {
		for j, mode := range []string{cacheAuto, cacheOff} {
			r := &CacheRun{Door: door, Mode: mode, App: s.App}
			tokens := e.tokens
			if mode == cacheOff {
				r.App, tokens = s.CompareApp, offTokens
			}
			res.Runs = append(res.Runs, r)
			res.byKey[door+"/"+mode] = r
			user := 2*i + j
			tok := tokens.forUser(s.user(user), user)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := e.converse(ctx, r, tok, func() { bar.add(1) }); err != nil {
					r.Err = err.Error()
				}
			}()
		}
	}
	wg.Wait()

	rep := &Report{Scenario: s.Scenario, URL: s.URL, Started: start, Seconds: time.Since(start).Seconds(),
		Params: map[string]any{"turns": s.Turns, "system_tokens": s.SystemTokens, "doors": strings.Join(s.Doors, ","),
			"app": s.App, "compare_app": s.CompareApp, "max_tokens": s.MaxTokens},
		Accounting: Accounting{Errors: map[string]int64{}}, PromptCache: res}
	var ttfts []time.Duration
	for _, r := range res.Runs {
		r.sum(res.Prices)
		rep.Accounting.Sent += int64(s.Turns)
		rep.Accounting.Done += int64(len(r.Turns))
		rep.Accounting.Accepted += int64(len(r.Turns))
		for _, t := range r.Turns {
			ttfts = append(ttfts, time.Duration(t.TTFTMs*float64(time.Millisecond)))
		}
		if r.Err != "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s door, prompt_cache %s: %s", r.Door, r.Mode, r.Err))
			rep.Accounting.Errors["conversation"]++
		}
	}
	rep.Latencies.ClientTTFT = dist(ttfts)
	for _, door := range s.Doors {
		a, o := res.byKey[door+"/"+cacheAuto], res.byKey[door+"/"+cacheOff]
		c := CacheComparison{Door: door, MedianTTFTOff: o.MedianTTFTFrom3, MedianTTFTAuto: a.MedianTTFTFrom3,
			InputCostSaving: saving(o.InputCostUSD, a.InputCostUSD), CostSaving: saving(o.CostUSD, a.CostUSD),
			SameAnswers: len(a.Turns) == len(o.Turns)}
		for i := range min(len(a.Turns), len(o.Turns)) {
			c.SameAnswers = c.SameAnswers && a.Turns[i].text == o.Turns[i].text
		}
		res.Comparisons = append(res.Comparisons, c)
		if a.Err != "" || o.Err != "" {
			continue
		}
		if s.MockText && !c.SameAnswers {
			rep.Problems = append(rep.Problems, door+" door: the answers differ with and without the prompt cache")
		}
		if c.InputCostSaving < promptCacheGoalSaving {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s door: input cost %.1f%% lower with the prompt cache, the goal is %.0f%%", door, c.InputCostSaving, promptCacheGoalSaving))
		}
		if c.MedianTTFTAuto >= c.MedianTTFTOff {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s door: median TTFT from turn 3 not lower with the prompt cache (%.0f ms vs %.0f ms)", door, c.MedianTTFTAuto, c.MedianTTFTOff))
		}
	}
	if slices.Contains(s.Doors, "openai") {
		rep.Notes = append(rep.Notes, "OpenAI's usage has no cache-write count (prompt_tokens_details.cached_tokens are the reads): "+
			"on the openai rows the written tokens are in the full-price input, priced at the input price, which understates auto's cost there by the write premium; the ws rows are exact")
	}
	return rep, nil
}

// promptCacheGoalSaving is the goal: input cost at least this much lower (%).
const promptCacheGoalSaving = 70.0

func saving(before, after float64) float64 {
	if before == 0 {
		return 0
	}
	return 100 * (before - after) / before
}

// sum totals a run and prices its turns.
func (r *CacheRun) sum(p [4]float64) {
	var late []time.Duration
	for i := range r.Turns {
		t := &r.Turns[i]
		input := (float64(t.FullPriceInput)*p[0] + float64(t.CacheRead)*p[2] + float64(t.CacheWrite)*p[3]) / 1000
		t.CostUSD = input + float64(t.Output)*p[1]/1000
		r.FullPriceInput += t.FullPriceInput
		r.CacheRead += t.CacheRead
		r.CacheWrite += t.CacheWrite
		r.Output += t.Output
		r.InputCostUSD += input
		r.CostUSD += t.CostUSD
		if t.Turn >= 3 {
			late = append(late, time.Duration(t.TTFTMs*float64(time.Millisecond)))
		}
	}
	r.MedianTTFTFrom3 = dist(late).P50
}

// systemPrompt is a system prompt of about n tokens (four bytes each, the
// gateway's estimate and the mock's count), naming the door and the run so
// that conversations through different doors, or of an earlier run within
// the cache's five minutes, share no cached prefix: every run starts cold.
func systemPrompt(door, run string, n int) string {
	head := fmt.Sprintf("You are the support assistant of a small airline, answering through the %s door (run %s). ", door, run)
	body := "Answer questions about bookings, baggage, seats and refunds precisely and politely. "
	var b strings.Builder
	b.WriteString(head)
	for b.Len() < 4*n {
		b.WriteString(body)
	}
	return b.String()[:4*n]
}

// question is the user's question of a turn.
func question(turn int) string {
	return fmt.Sprintf("Question %d: what does my booking allow for this part of the trip?", turn)
}

// turnAnswer is what one turn brought back.
type turnAnswer struct {
	text                       string
	input, read, write, output int64
	ttft                       time.Duration
}

// converse runs one conversation of --turns turns through r.Door.
func (e *env) converse(ctx context.Context, r *CacheRun, token func(context.Context) (string, error), turned func()) error {
	system := systemPrompt(r.Door, e.run, e.s.SystemTokens)
	var ask func(context.Context, []client.Message) (turnAnswer, error)
	switch r.Door {
	case "ws":
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := client.Dial(dctx, client.Options{URLs: []string{e.s.URL}, Token: token})
		cancel()
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer c.Close()
		ask = func(ctx context.Context, msgs []client.Message) (turnAnswer, error) {
			return e.askWS(ctx, c, system, msgs)
		}
	case "openai":
		ask = func(ctx context.Context, msgs []client.Message) (turnAnswer, error) {
			return e.askOpenAI(ctx, token, system, msgs)
		}
	}
	var msgs []client.Message
	for turn := 1; turn <= e.s.Turns; turn++ {
		msgs = append(msgs, client.Message{Role: "user", Content: question(turn)})
		tctx, cancel := context.WithTimeout(ctx, e.s.Timeout)
		a, err := ask(tctx, msgs)
		cancel()
		if err != nil {
			return fmt.Errorf("turn %d: %w", turn, err)
		}
		r.Turns = append(r.Turns, CacheTurn{Turn: turn, FullPriceInput: a.input, CacheRead: a.read, CacheWrite: a.write,
			Output: a.output, TTFTMs: ms(a.ttft), text: a.text})
		msgs = append(msgs, client.Message{Role: "assistant", Content: a.text})
		turned()
	}
	return nil
}

// askWS sends one turn on the WebSocket and times its first chunk.
func (e *env) askWS(ctx context.Context, c *client.Client, system string, msgs []client.Message) (turnAnswer, error) {
	var first time.Time
	var once sync.Once
	start := time.Now()
	call, err := c.Send(ctx, client.Request{System: system, Messages: slices.Clone(msgs), Model: e.s.Model, MaxTokens: e.s.MaxTokens,
		OnChunk: func(int, string) { once.Do(func() { first = time.Now() }) }})
	if err != nil {
		return turnAnswer{}, err
	}
	done, err := call.Wait(ctx)
	if err != nil {
		return turnAnswer{}, err
	}
	u := done.Usage
	return turnAnswer{text: done.Text, input: u.InputTokens, read: u.CacheReadInputTokens, write: u.CacheWriteInputTokens,
		output: u.OutputTokens, ttft: first.Sub(start)}, nil
}

// askOpenAI sends one turn to POST /v1/chat/completions (streaming, with
// usage) and times its first content event. OpenAI's usage counts every
// input token in prompt_tokens and the reads in cached_tokens; writes are
// not told apart (see the report's note).
func (e *env) askOpenAI(ctx context.Context, token func(context.Context) (string, error), system string, msgs []client.Message) (turnAnswer, error) {
	tok, err := token(ctx)
	if err != nil {
		return turnAnswer{}, err
	}
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	body := map[string]any{"messages": []message{{Role: "system", Content: system}}, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}}
	for _, m := range msgs {
		body["messages"] = append(body["messages"].([]message), message{Role: m.Role, Content: m.Content})
	}
	if e.s.Model != "" {
		body["model"] = e.s.Model
	}
	if e.s.MaxTokens > 0 {
		body["max_tokens"] = e.s.MaxTokens
	}
	data, _ := json.Marshal(body)
	base := strings.Replace(strings.Replace(e.s.URL, "wss://", "https://", 1), "ws://", "http://", 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/v1/ws")+"/v1/chat/completions", bytes.NewReader(data))
	if err != nil {
		return turnAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return turnAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return turnAnswer{}, fmt.Errorf("openai door: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var a turnAnswer
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			a.text = text.String()
			return a, nil
		}
		var ev struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int64 `json:"prompt_tokens"`
				CompletionTokens    int64 `json:"completion_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return a, fmt.Errorf("openai door: bad event: %w", err)
		}
		if ev.Error != nil {
			return a, fmt.Errorf("openai door: error event %s", ev.Error)
		}
		for _, c := range ev.Choices {
			if c.Delta.Content != "" && a.ttft == 0 {
				a.ttft = time.Since(start)
			}
			text.WriteString(c.Delta.Content)
		}
		if u := ev.Usage; u != nil {
			a.input, a.output = u.PromptTokens, u.CompletionTokens
			if d := u.PromptTokensDetails; d != nil {
				a.read = d.CachedTokens
				a.input -= d.CachedTokens
			}
		}
	}
	return a, fmt.Errorf("openai door: stream ended without [DONE]: %v", sc.Err())
}

// writeMarkdown writes the summary per door and mode, then every turn side by side.
func (p *PromptCacheResult) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "%d turns, a %d-token system prompt; prices per 1,000 tokens: input $%g, output $%g, cache read $%g, cache write $%g.\n\n",
		p.Turns, p.SystemTokens, p.Prices[0], p.Prices[1], p.Prices[2], p.Prices[3])
	b.WriteString("| door | prompt_cache | input at full price | cache read | cache write | output | input cost | total cost | median TTFT, turns 3+ |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range p.Runs {
		fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %d | $%.4f | $%.4f | %.0f ms |\n", r.Door, r.Mode, r.FullPriceInput, r.CacheRead,
			r.CacheWrite, r.Output, r.InputCostUSD, r.CostUSD, r.MedianTTFTFrom3)
	}
	b.WriteString("\n| door | input cost lower | total cost lower | median TTFT 3+ off / auto | same answers |\n|---|---|---|---|---|\n")
	for _, c := range p.Comparisons {
		fmt.Fprintf(b, "| %s | %.1f%% | %.1f%% | %.0f / %.0f ms | %v |\n", c.Door, c.InputCostSaving, c.CostSaving, c.MedianTTFTOff, c.MedianTTFTAuto, c.SameAnswers)
	}
	b.WriteString("\nPer turn: input billed at full price, cost (USD) and TTFT, off | auto.\n\n| turn |")
	for i := 0; i < len(p.Runs); i += 2 {
		fmt.Fprintf(b, " %s input | %s cost | %s TTFT ms |", p.Runs[i].Door, p.Runs[i].Door, p.Runs[i].Door)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|---|---|", len(p.Runs)/2) + "\n")
	for t := range p.Turns {
		fmt.Fprintf(b, "| %d |", t+1)
		for i := 0; i+1 < len(p.Runs); i += 2 {
			a, o := p.Runs[i], p.Runs[i+1]
			if t >= len(a.Turns) || t >= len(o.Turns) {
				b.WriteString(" - | - | - |")
				continue
			}
			ta, to := a.Turns[t], o.Turns[t]
			fmt.Fprintf(b, " %d / %d | %.4f / %.4f | %.0f / %.0f |", to.FullPriceInput, ta.FullPriceInput, to.CostUSD, ta.CostUSD, to.TTFTMs, ta.TTFTMs)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}
