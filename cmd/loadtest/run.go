package main

import (
	"context"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// env is what every scenario shares.
type env struct {
	s        *settings
	tokens   *tokenSource
	progress *progressFactory
	run      string // promptcache: this run's name, in its system prompts
}

// dial opens a session for user i.
func (e *env) dial(ctx context.Context, user int, reconnect bool, l *ledger) (*client.Client, error) {
	return e.dialURL(ctx, e.s.URL, user, reconnect, l)
}

// dialURL is dial to another gateway (overhead's --compare-url).
func (e *env) dialURL(ctx context.Context, url string, user int, reconnect bool, l *ledger) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, client.Options{
		URLs:      []string{url},
		Token:     e.tokens.forUser(e.s.user(user), user),
		Reconnect: reconnect,
	})
	l.session(err)
	return c, err
}

// prefetch mints the tokens of users 0..n-1 before the clock starts.
func (e *env) prefetch(ctx context.Context, n int) error {
	if e.tokens.cmd == "" {
		return nil
	}
	bar := e.progress.bar(int64(n), "minting tokens")
	defer bar.finish()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.tokens.get(ctx, e.s.user(i), i); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
			bar.add(1)
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// ask sends the n-th request on c, waits for its terminal frame (at most
// --timeout) and books the outcome. onChunk, if set, sees every chunk in
// seq order.
func (e *env) ask(ctx context.Context, c *client.Client, n int, l *ledger, onChunk func(seq int, text string)) outcome {
	prompt := e.s.prompt(n)
	req := client.Request{Messages: []client.Message{{Role: "user", Content: prompt}}, Model: e.s.Model,
		MaxTokens: e.s.MaxTokens, OnChunk: onChunk}
	l.sent()
	call, err := c.Send(ctx, req)
	if err != nil {
		// The request never left: book it as an error with an empty call.
		o := outcome{call: &client.Call{}, err: err, ended: time.Now()}
		l.recordUnsent(err)
		return o
	}
	wctx, cancel := context.WithTimeout(ctx, e.s.Timeout)
	done, err := call.Wait(wctx)
	timedOut := wctx.Err() != nil && ctx.Err() == nil
	cancel()
	o := outcome{call: call, done: done, err: err, timedOut: timedOut, ended: time.Now(), prompt: prompt}
	if ctx.Err() != nil && err != nil && done == nil {
		// The run was interrupted: not the gateway's fault, not booked.
		return o
	}
	l.record(o)
	return o
}

// recordUnsent books a request the client could not send.
func (l *ledger) recordUnsent(err error) {
	l.mu.Lock()
	l.a.Errors[errCode(err)]++
	l.mu.Unlock()
}
