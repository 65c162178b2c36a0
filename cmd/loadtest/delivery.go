package main

import (
	"context"
	"sync"
	"time"
)

// delivery is the article's Test 1: U users, R requests each, one after
// another on one connection per session.
func (e *env) delivery(ctx context.Context) (*Report, error) {
	s := e.s
	if err := e.prefetch(ctx, s.Users); err != nil {
		return nil, err
	}
	l := newLedger(s.MockText)
	bar := e.progress.bar(int64(s.Users*s.Requests), "delivery")
	start := time.Now()
	var wg sync.WaitGroup
	for u := 0; u < s.Users; u++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.dial(ctx, u, false, l)
			if err != nil {
				bar.add(s.Requests)
				return
			}
			defer c.Close()
			for r := 0; r < s.Requests && ctx.Err() == nil; r++ {
				o := e.ask(ctx, c, u*s.Requests+r, l, nil)
				bar.add(1)
				if isDisconnect(o.err) {
					// Reconnect is off: the session is gone, and so are the rest of its requests.
					l.mu.Lock()
					l.a.Errors["not_sent_after_disconnect"] += int64(s.Requests - r - 1)
					l.mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, lat := l.snapshot()
	rep := &Report{Scenario: "delivery", URL: s.URL, Started: start, Seconds: time.Since(start).Seconds(),
		Params:     map[string]any{"users": s.Users, "requests_per_user": s.Requests, "tenant": s.Tenant, "app": s.App},
		Accounting: a, Latencies: lat}
	rep.Problems = a.problems()
	return rep, nil
}

func isDisconnect(err error) bool {
	return err != nil && errCode(err) == "client_disconnected"
}
