package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// run is the flight's goroutine from the model call to its one ending:
// stream, then finish, whatever happens, a panic included. ctx is the
// request's: it ends with its terminal (f.cancel).
func (f *flight) run(ctx context.Context) {
	defer f.g.wg.Done()
	defer f.dropContent() // whatever way the flight ends
	defer func() {
		// A bug must not leave an accepted request without its terminal.
		if v := recover(); v != nil {
			f.logger.Error("request_panic", zap.Any("panic", v), zap.Stack("stack"))
			if !f.waitLanded() || f.ended {
				return // land ended this flight, or it panicked finishing
			}
			f.end(f.owned(router.Outcome{}, fmt.Errorf("panic: %v", v)))
		}
	}()
	defer f.cancel()
	if o, landed := f.stream(ctx); landed {
		f.end(o)
	}
}

// stream calls the model (or replays the cached answer) into the log and
// returns the request's outcome, which finish takes; landed is false when
// land ended this flight (rejected, or following another server), and
// there is nothing to finish.
func (f *flight) stream(ctx context.Context) (o outcome, landed bool) {
	g := f.g
	f.logger.Debug("model_started", zap.String("model", f.chain[0].ID))
	var out router.Outcome
	var err error
	if f.cached != nil {
		out = f.fromCache()
	} else {
		call := f.call()
		if f.blockMode {
			call.OnBlock = f.onBlock
		}
		out, err = g.router.Stream(ctx, f.chain, call, f.onDelta)
	}
	if !f.waitLanded() {
		return outcome{}, false
	}
	f.dropContent()
	if err != nil {
		select {
		case <-f.cancelled:
			if f.lostLease.Load() {
				err = fmt.Errorf("%w: another server took the request over: %w", errInterrupted, err)
			} else {
				err = fmt.Errorf("%w: %w", errCancelled, err)
			}
		default:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("%w: request ran past %s: %w", errTimeout, g.opts.RequestTimeout, err)
			}
		}
	} else {
		// Before the terminal, so a client that asks again after done gets the hit.
		f.storeCache(out, f.log.Pieces())
	}
	return f.owned(out, err), true
}

// waitLanded waits for land and reports whether this server runs the
// request (the record is stored, or there is no request store).
func (f *flight) waitLanded() bool {
	<-f.landed
	return f.landErr == nil && !f.following
}

// dropContent forgets what the request asked once its model call ended
// (and land decided): its messages with their attachments, the model
// call's copy of them, its system prompt and tools, and releases the
// request (Request.Release). What resume, the record and the usage
// record need (id, arrival, model, features) stays.
func (f *flight) dropContent() {
	f.messages = nil
	f.req.Messages, f.req.System, f.req.Tools, f.req.ToolChoice = nil, "", nil, nil
	if release := f.req.Release; release != nil {
		f.req.Release = nil
		release()
	}
}

// call is the model call of the request (its cache key too).
func (f *flight) call() router.Call {
	c := router.Call{System: f.req.System, Messages: f.messages, MaxTokens: f.maxTokens,
		Temperature: f.req.Temperature, TopP: f.req.TopP, Stop: f.req.Stop,
		AutoCache: f.app.PromptCache == config.PromptCacheAuto, PrefixCachePoint: f.req.PrefixCachePoint}
	if c.Messages == nil {
		c.Messages = routerMessages(f.req.Messages)
	}
	if f.placed() {
		c.Affinity = f.conversation()
	}
	f.tools(&c)
	if gr := f.app.Guardrail; gr != nil {
		c.Guardrail = &router.Guardrail{ID: gr.ID, Version: gr.Version, StreamMode: gr.StreamMode}
	}
	return c
}

// placed reports whether a model of the chain has placements to choose among.
func (f *flight) placed() bool {
	for i := range f.chain {
		if len(f.chain[i].Places) > 1 {
			return true
		}
	}
	return false
}

// conversation is the request's conversation key, which keeps a
// conversation on one placement (router.Call.Affinity): the owner
// (tenant, app, user), the system prompt and the first message. Every
// turn of a conversation shares them on every door (an HTTP client has
// no session; a chat id is not on every wire), and they begin the prefix
// Bedrock's prompt cache reads, so a conversation that stays put keeps
// its cache. Two conversations of one user that open alike share a
// placement, as they would share a cached prefix.
func (f *flight) conversation() string {
	h := sha256.New()
	for _, s := range []string{f.caller.Principal.Owner(), f.req.System} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if len(f.req.Messages) > 0 {
		h.Write([]byte(f.req.Messages[0].Text()))
	}
	return string(h.Sum(nil)[:16])
}

// routerMessages converts messages for the model call, blocks included
// (validation decoded the attachments).
func routerMessages(ms []call.Message) []router.Message {
	out := make([]router.Message, len(ms))
	for i, m := range ms {
		out[i] = router.Message{Role: m.Role, Content: m.Content}
		if m.Blocks != nil {
			out[i].Blocks = routerBlocks(m.Blocks)
		}
	}
	return out
}

// onDelta appends a text delta of a text-only call.
func (f *flight) onDelta(text string) { f.appendPiece(call.TextPiece(text)) }

// appendPiece appends one chunk of the answer (a protocol piece) to the log.
func (f *flight) appendPiece(piece string) {
	if !f.waitLanded() {
		return // the request did not land here: nothing reaches the client
	}
	f.log.Append(piece) // before the log line: the client's first token does not wait on logging
	if f.first.IsZero() {
		f.first = f.g.opts.Now()
		f.root.AddEvent("first_token")
		f.logger.Debug("first_token", zap.Int64("ttft_ms", ttftMs(f.first.Sub(f.req.ReceivedAt))))
	}
}

// fromCache streams a cached answer through the same log and charges it by
// the app's policy: the input estimate (default) or nothing.
func (f *flight) fromCache() router.Outcome {
	for _, c := range f.cached.Chunks {
		f.appendPiece(c)
	}
	var usage router.Usage
	if f.app.Cache.Charge != config.CacheChargeNone {
		usage.InputTokens = int(f.estimate)
	}
	return router.Outcome{Result: router.Result{Usage: usage, UsageReported: true, StopReason: f.cached.StopReason},
		Model: f.cached.Model}
}

// storeCache keeps a successful answer of the requested model for later hits.
func (f *flight) storeCache(out router.Outcome, chunks []string) {
	if f.cacheKey == "" || f.cached != nil || out.FallbackFrom != "" || out.StopReason == "guardrail_intervened" {
		return
	}
	ctx, cancel := context.WithTimeout(f.g.settleBase, f.g.opts.StoreTimeout)
	defer cancel()
	f.g.cache.Put(ctx, f.cacheKey, router.CachedAnswer{Model: out.Model, Chunks: chunks, Usage: out.Usage,
		StopReason: out.StopReason}, f.app.Cache.TTL.D())
}

// checkpointer keeps a running request's record current in the background.
type checkpointer struct {
	done   chan struct{}
	stored chan int
	once   sync.Once
	seq    int
}

func (f *flight) startCheckpoints() *checkpointer {
	c := &checkpointer{done: make(chan struct{}), stored: make(chan int, 1)}
	go func() { c.stored <- f.checkpoint(c.done) }()
	return c
}

// stop ends the checkpoints and returns the seq the record holds.
func (c *checkpointer) stop() int {
	c.once.Do(func() {
		close(c.done)
		c.seq = <-c.stored
	})
	return c.seq
}

// checkpoint keeps a running request's record current: chunks appended in
// batches (every CheckpointInterval or CheckpointChunks chunks) and the
// lease renewed. It returns when done is closed, leaving the stored seq.
func (f *flight) checkpoint(done <-chan struct{}) int {
	g := f.g
	stored := 0
	lastWrite := time.Now()
	tick := time.NewTicker(g.opts.CheckpointInterval)
	defer tick.Stop()
	for {
		snap := f.log.Read(stored)
		if snap.Terminal != nil {
			return stored
		}
		if len(snap.Chunks) >= g.opts.CheckpointChunks || time.Since(lastWrite) >= g.opts.CheckpointInterval {
			ctx, cancel := g.storeCtx()
			err := g.records.Checkpoint(ctx, f.caller.Principal.Owner(), f.req.RequestID, g.opts.Instance, stored,
				snap.Chunks)
			cancel()
			switch {
			case err == nil:
				stored += len(snap.Chunks)
				lastWrite = time.Now()
				// The next tick is one interval after this write, so a
				// request with nothing to append still renews (and sees a
				// cancel sent to another server) every interval, not every other.
				tick.Reset(g.opts.CheckpointInterval)
			case errors.Is(err, stream.ErrCancelled):
				// The client cancelled on another server: stop the model
				// call; the request ends here as `cancelled`, once.
				f.logger.Info("cancelled_elsewhere", zap.Int("seq", stored))
				f.root.AddEvent("cancelled_elsewhere")
				f.log.Cancel()
				return stored
			case errors.Is(err, stream.ErrLostLease):
				// Only when the fleet judged this server gone (expelled).
				f.logger.Warn("lease_lost")
				f.root.AddEvent("lease_lost")
				f.lostLease.Store(true)
				f.log.Cancel()
				return stored
			case errors.Is(err, stream.ErrTooLarge):
				f.logger.Warn("checkpoint_too_large", zap.Int("seq", stored))
				lastWrite = time.Now()
			case errors.Is(err, stream.ErrConflict):
				// An earlier write whose answer was lost landed late (a
				// stalled store delivers it after the call gave up):
				// continue from what the record holds.
				if n, ok := g.storedSeq(f.caller.Principal.Owner(), f.req.RequestID, f.log); ok {
					f.logger.Info("checkpoint_resynced", zap.Int("from", stored), zap.Int("to", n))
					stored = n
				}
			default:
				// Retried at the next tick with everything since: the
				// record catches up; the answer streams on meanwhile.
				f.logger.Warn("checkpoint_failed", zap.Error(err))
			}
		}
		select {
		case <-done:
			return stored
		case <-snap.Changed:
		case <-tick.C:
		}
	}
}

// owned is the outcome of a request this server ran, from its model
// call's result: what stream hands finish.
func (f *flight) owned(out router.Outcome, err error) outcome {
	g := f.g
	end := g.opts.Now()
	pieces := f.log.Pieces()
	answer := call.Assemble(pieces)
	usage := call.Usage{InputTokens: int64(out.Usage.InputTokens), OutputTokens: int64(out.Usage.OutputTokens),
		CacheReadInputTokens: int64(out.Usage.CacheReadInputTokens), CacheWriteInputTokens: int64(out.Usage.CacheWriteInputTokens)}
	switch {
	case out.UsageReported:
	case len(pieces) == 0 && refusedByModel(err):
		// No model took the call (throttled, unavailable, refused):
		// Bedrock bills nothing, and neither does the gateway.
		usage = call.Usage{}
	default:
		// The stream broke before Bedrock reported usage: charge the input
		// estimate plus what was actually streamed.
		usage = call.Usage{InputTokens: f.estimate, OutputTokens: quota.EstimateOutputTokens(answer.Generated)}
	}
	model := out.Model
	if model == "" {
		model = f.requestedModel()
	}
	var ttft int64
	if !f.first.IsZero() {
		ttft = ttftMs(f.first.Sub(f.req.ReceivedAt))
	}
	o := f.outcome(err)
	o.how, o.text, o.chunks, o.usage, o.model = endOwned, answer.Text, len(pieces), usage, model
	o.toolCalls = answer.ToolCalls
	if f.blockMode || !answer.Plain {
		o.blocks = answer.Blocks
	}
	o.fallbackFrom, o.stopReason, o.end = out.FallbackFrom, out.StopReason, end
	o.place, o.tier = out.Place, out.ServiceTier
	o.ttft, o.latency = ttft, end.Sub(f.req.ReceivedAt).Milliseconds()
	o.checkpoints = f.checkpoints
	o.settledElsewhere = f.lostLease.Load()
	return o
}

// end finishes the flight with o, once per flight (a panic inside finish
// must not charge or record twice).
func (f *flight) end(o outcome) {
	if f.ended {
		return
	}
	f.ended = true
	if f.admitted {
		f.admitted = false
		f.g.slots.release(f.slotKey()) // the slot frees with the terminal (settlement is bookkeeping), before the client can send more
	}
	f.g.finish(f.tctx, o)
}

// refusedByModel reports whether a model call's error says the model
// refused it before doing any work: throttled, not ready, unavailable,
// invalid or not permitted, with nothing streamed. Bedrock does not bill
// such a call. After a fallback this is the last model's error (the
// router's ErrAllUnavailable wraps it); a first-token timeout, a
// cancellation or the request's own deadline are not refusals (the model
// may have read the input), so they keep the estimate.
func refusedByModel(err error) bool {
	var me *router.ModelError
	if !errors.As(err, &me) || me.Streamed {
		return false
	}
	switch me.Kind {
	case router.KindThrottled, router.KindNotReady, router.KindUnavailable, router.KindValidation, router.KindAccessDenied:
		return true
	}
	return false
}

// ttftMs is the time to the first chunk in whole milliseconds, rounded up:
// a request that sent a chunk has ttft_ms >= 1 (a cached answer's first
// chunk is often under a millisecond), so 0 keeps meaning "no chunk".
func ttftMs(d time.Duration) int64 {
	return max(1, (d + time.Millisecond - 1).Milliseconds())
}
