package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// QuotaResult is the article's Test 2 table.
type QuotaResult struct {
	Boarded      int64   `json:"boarded"`
	Clean429     int64   `json:"clean_429"`    // quota_exceeded, status 429, "Token quota exceeded", retry_after_ms > 0
	Unclean429   int64   `json:"unclean_429"`  // quota_exceeded without one of those
	RateLimited  int64   `json:"rate_limited"` // the per-user/session in-flight caps (not the quota)
	NeverHeard   int64   `json:"never_heard"`  // no terminal frame within --timeout
	Limit        int64   `json:"limit"`        // --limit
	FrameLimit   int64   `json:"frame_limit"`  // the tightest window's limit in accepted frames
	FrameWindow  string  `json:"frame_window"` // and its window
	PriorUsage   int64   `json:"prior_usage"`  // tokens used in the window before this run (from accepted frames)
	ChargedInRun int64   `json:"charged"`      // sum of done.usage in this run
	TotalUsage   int64   `json:"total_usage"`  // prior + charged
	PastLimit    int64   `json:"past_limit"`   // done requests that finished with the window over --limit
	TokensOver   int64   `json:"tokens_over"`  // max(0, total - limit)
	RequestsPerS float64 `json:"requests_per_s"`
}

// quota is the article's Test 2: N sessions hammer an app with a tiny quota.
func (e *env) quota(ctx context.Context) (*Report, error) {
	s := e.s
	users := s.Users
	if s.SameUser {
		users = 1
	}
	if err := e.prefetch(ctx, users); err != nil {
		return nil, err
	}
	l := newLedger(s.MockText)
	var mu sync.Mutex
	q := QuotaResult{Limit: s.Limit}
	prior := int64(math.MaxInt64)

	start := time.Now()
	deadline := start.Add(s.Duration)
	stop := make(chan struct{})
	bar := e.progress.bar(int64(s.Duration/time.Second), "quota (s)")
	bar.clock(start, stop)
	var wg sync.WaitGroup
	for i := 0; i < s.Users; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := i
			if s.SameUser {
				user = 0
			}
			c, err := e.dial(ctx, user, false, l)
			if err != nil {
				return
			}
			defer c.Close()
			for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				o := e.ask(ctx, c, i*1_000_000+n, l, nil)
				var ce *client.Error
				mu.Lock()
				if a := o.call.AcceptedFrame(); a != nil && a.Quota != nil {
					prior = min(prior, a.Quota.Limit-a.Quota.Remaining-a.ReservedTokens)
					q.FrameLimit, q.FrameWindow = a.Quota.Limit, a.Quota.Window
				}
				switch {
				case o.timedOut:
					q.NeverHeard++
				case o.err == nil && o.done != nil:
					q.Boarded++
				case errors.As(o.err, &ce) && ce.Code == "quota_exceeded":
					if ce.Status == 429 && ce.Message == "Token quota exceeded" && ce.RetryAfterMs > 0 {
						q.Clean429++
					} else {
						q.Unclean429++
					}
				case errors.As(o.err, &ce) && ce.Code == "rate_limited":
					q.RateLimited++
				}
				mu.Unlock()
				if isDisconnect(o.err) {
					return
				}
				select {
				case <-time.After(s.Pause):
				case <-ctx.Done():
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)

	if prior == math.MaxInt64 {
		prior = 0 // nothing was accepted: no frame told us
	}
	q.PriorUsage = prior
	l.mu.Lock()
	done := slices.Clone(l.doneTimes)
	l.mu.Unlock()
	slices.SortFunc(done, func(a, b usageAt) int { return a.at.Compare(b.at) })
	total := prior
	for _, d := range done {
		total += d.tokens
		q.ChargedInRun += d.tokens
		if total > s.Limit {
			q.PastLimit++
		}
	}
	q.TotalUsage = total
	q.TokensOver = max(0, total-s.Limit)
	a, lat := l.snapshot()
	q.RequestsPerS = float64(a.Sent) / elapsed.Seconds()

	rep := &Report{Scenario: "quota", URL: s.URL, Started: start, Seconds: elapsed.Seconds(),
		Params: map[string]any{"users": s.Users, "same_user": s.SameUser, "duration_s": s.Duration.Seconds(),
			"pause_ms": s.Pause.Milliseconds(), "tenant": s.Tenant, "app": s.App, "limit": s.Limit},
		Accounting: a, Latencies: lat, Quota: &q}
	rep.Problems = a.problems("quota_exceeded", "rate_limited")
	if q.PastLimit > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d requests past the limit (%d tokens over)", q.PastLimit, q.TokensOver))
	}
	if q.Unclean429 > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d quota_exceeded frames without status 429, the message or retry_after_ms", q.Unclean429))
	}
	if q.FrameLimit != 0 && q.FrameLimit != s.Limit {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the gateway's tightest window (%s) has limit %d, --limit is %d",
			q.FrameWindow, q.FrameLimit, s.Limit))
	}
	return rep, nil
}
