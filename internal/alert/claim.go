package alert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// ErrClaimsFull: the memory claimer holds MaxMemoryClaims unexpired
// claims; the alert is not sent.
var ErrClaimsFull = errors.New("alert: too many claims held in memory")

// MaxMemoryClaims bounds the claims NewMemoryClaimer's claimer holds (each
// until its window ends plus ClaimGrace).
const MaxMemoryClaims = 100000

// NewMemoryClaimer returns a Claimer for one process: a claim is true the
// first time its key is claimed until it expires.
func NewMemoryClaimer() Claimer {
	return &memoryClaimer{claims: map[string]time.Time{}, sweepAt: 1024, now: time.Now}
}

type memoryClaimer struct {
	mu      sync.Mutex
	claims  map[string]time.Time // key -> expires
	sweepAt int                  // sweep the expired claims once this many are held
	now     func() time.Time
}

func (m *memoryClaimer) Claim(_ context.Context, key string, expires time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if exp, ok := m.claims[key]; ok && now.Before(exp) {
		return false, nil
	}
	if len(m.claims) >= m.sweepAt {
		for k, exp := range m.claims {
			if !now.Before(exp) {
				delete(m.claims, k)
			}
		}
		m.sweepAt = min(max(1024, 2*len(m.claims)), MaxMemoryClaims)
	}
	if len(m.claims) >= MaxMemoryClaims {
		return false, ErrClaimsFull
	}
	m.claims[key] = expires
	return true, nil
}

// Attribute names of a claim item: the quota table's TTL attribute, so
// DynamoDB forgets claims as it forgets the counters they are about.
const (
	claimPrefix  = "alert#"
	attrExpires  = "expires_at"
	opAlertClaim = "alert_claim"
)

// NewDynamoClaimer returns a Claimer on t (the quota table): one
// conditional PutItem of {pk: "alert#"+key, expires_at: expires (Unix
// seconds)} if attribute_not_exists(pk). A refused condition is false; any
// other error is the claim's error (an ambiguous write whose retry was
// refused reads as false: the alert is lost, never sent twice).
func NewDynamoClaimer(t *dynamotable.Table) Claimer { return &dynamoClaimer{table: t} }

type dynamoClaimer struct{ table *dynamotable.Table }

func (d *dynamoClaimer) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	item := dynamotable.Item{
		dynamotable.PK: dynamotable.S(claimPrefix + key),
		attrExpires:    dynamotable.N(expires.Unix()),
	}
	err := d.table.Put(ctx, opAlertClaim, item, "attribute_not_exists(#pk)", map[string]string{"#pk": dynamotable.PK}, nil)
	if _, refused := dynamotable.Refused(err); refused {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("alert claim: %w", err)
	}
	return true, nil
}
