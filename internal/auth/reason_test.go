package auth

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Each 401 sentinel has its own client message, found through any wrapping,
// and none repeats the wrapped detail (a kid, a client id) the log keeps.
func TestRefusalReason(t *testing.T) {
	seen := map[string]error{}
	for _, r := range refusalReasons {
		err := fmt.Errorf("verify: kid k-secret-7 client contoso-x: %w", r.err)
		got := RefusalReason(err)
		if got != r.reason {
			t.Errorf("RefusalReason(%v) = %q, want %q", err, got, r.reason)
		}
		if strings.Contains(got, "k-secret-7") || strings.Contains(got, "contoso-x") {
			t.Errorf("RefusalReason(%v) = %q tells the wrapped detail", err, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%v and %v both read %q", other, r.err, got)
		}
		seen[got] = r.err
	}
	for _, want := range []struct {
		err    error
		reason string
	}{
		{ErrExpired, "token expired"},
		{ErrUnknownClient, "token's app client is not configured"},
		{ErrUnknownKey, "token signed by an unknown key"},
		{errors.New("jwks fetch: connection refused"), "invalid token"},
	} {
		if got := RefusalReason(fmt.Errorf("x: %w", want.err)); got != want.reason {
			t.Errorf("RefusalReason(%v) = %q, want %q", want.err, got, want.reason)
		}
	}
}
