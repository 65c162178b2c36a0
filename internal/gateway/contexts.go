package gateway

import (
	"context"
	"time"
)

// The contexts of the pipeline's store calls: the server's own, and those
// made for a caller (ctx first), each bounded and ended by the drain.

// storeCtx bounds one store call the server makes on its own behalf.
func (g *Gateway) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.settleBase, g.opts.StoreTimeout)
}

// callCtx bounds one store call made for a caller: it carries ctx's values
// and ends with ctx, after StoreTimeout, or at the drain's deadline, as
// the server's own calls do.
func (g *Gateway) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return within(ctx, g.settleBase, g.opts.StoreTimeout)
}

// within is ctx bounded by d and ended by stop too (the pipeline's own
// end: base or settleBase), whichever comes first.
func within(ctx, stop context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, d)
	unhook := context.AfterFunc(stop, cancel)
	return ctx, func() { unhook(); cancel() }
}
