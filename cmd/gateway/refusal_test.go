package main

import (
	"context"
	"errors"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// sendRetryingRefusals sends req and waits for its result within ctx, as a
// real client does under load: a retryable refusal before acceptance (an
// error frame without `chunks`: nothing ran, nothing was charged) is sent
// again with the same request_id after its retry_after_ms. It returns the
// last call, its result and how many refusals it met; the caller keeps its
// assertions on the answer strict.
func sendRetryingRefusals(ctx context.Context, c *client.Client, req client.Request) (*client.Call, *client.Done, int, error) {
	if req.RequestID == "" {
		req.RequestID = client.NewRequestID()
	}
	refusals := 0
	for {
		call, err := c.Send(ctx, req)
		if err != nil {
			return nil, nil, refusals, err
		}
		done, err := call.Wait(ctx)
		var e *client.Error
		if !errors.As(err, &e) || !e.Retryable || e.Chunks != nil || call.AcceptedFrame() != nil {
			return call, done, refusals, err
		}
		refusals++
		select {
		case <-ctx.Done():
			return call, nil, refusals, ctx.Err()
		case <-time.After(e.RetryAfter()):
		}
	}
}
