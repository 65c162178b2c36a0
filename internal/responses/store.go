package responses

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// Stored is a response as the door keeps it, for previous_response_id on
// any server and for GET, DELETE and input_items: the conversation the
// model saw (the chain's items, then the response's own input) and, once
// it ended, its output. A response with store:false is kept only for the
// resume window, hidden from GET, DELETE and input_items (OpenAI's 404).
type Stored struct {
	ID           string            `json:"id"` // the core's request id
	CreatedAt    int64             `json:"created_at"`
	Model        string            `json:"model,omitempty"`
	Instructions *string           `json:"instructions,omitempty"`
	Items        []json.RawMessage `json:"items"`
	Own          int               `json:"own"` // the last Own items are the response's own input
	Previous     string            `json:"previous,omitempty"`
	Store        bool              `json:"store"`
	Background   bool              `json:"background,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	// Response is the response object once the response ended (its
	// output and usage); nil until then.
	Response json.RawMessage `json:"response,omitempty"`
	Expires  int64           `json:"expires"` // Unix seconds
}

// Store keeps stored responses per user (auth.Principal.Owner): another
// user's id is not found.
type Store interface {
	Put(ctx context.Context, owner string, r *Stored) error
	// Get returns the response, nil when there is none (or it expired).
	Get(ctx context.Context, owner, id string) (*Stored, error)
	// Finish adds the ended response's object.
	Finish(ctx context.Context, owner, id string, response json.RawMessage) error
	// Delete removes it; false when there was none.
	Delete(ctx context.Context, owner, id string) (bool, error)
}

// MaxStoredBytes bounds one stored response (its conversation and its
// output): a DynamoDB item holds 400 KB. A continuation past it is
// refused naming previous_response_id (docs/responses.md, "Bounds").
const MaxStoredBytes = 350 << 10

// errTooLarge is a stored response over MaxStoredBytes.
type errTooLarge struct{ size int }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("the conversation is %d bytes stored, over the %d a stored response holds", e.size, MaxStoredBytes)
}

func encodeStored(r *Stored) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxStoredBytes {
		return nil, errTooLarge{len(b)}
	}
	return b, nil
}

// MemoryStore is Store in this process (dev mode, and a gateway without a
// requests table).
type MemoryStore struct {
	mu   sync.Mutex
	m    map[string][]byte
	now  func() time.Time
	held int
}

// memoryStoreBytes bounds what a MemoryStore holds: past it, expired
// responses are dropped, then a put is refused.
const memoryStoreBytes = 256 << 20

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{m: map[string][]byte{}, now: time.Now} }

func (s *MemoryStore) Put(_ context.Context, owner string, r *Stored) error {
	b, err := encodeStored(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := storeKey(owner, r.ID)
	if s.held+len(b) > memoryStoreBytes {
		now := s.now().Unix()
		for key, v := range s.m {
			var e struct {
				Expires int64 `json:"expires"`
			}
			if json.Unmarshal(v, &e) == nil && e.Expires <= now {
				s.held -= len(v)
				delete(s.m, key)
			}
		}
		if s.held+len(b) > memoryStoreBytes {
			return fmt.Errorf("stored responses: %d bytes held in memory (its bound)", s.held)
		}
	}
	s.held += len(b) - len(s.m[k])
	s.m[k] = b
	return nil
}

func (s *MemoryStore) Get(_ context.Context, owner, id string) (*Stored, error) {
	s.mu.Lock()
	b, ok := s.m[storeKey(owner, id)]
	s.mu.Unlock()
	if !ok {
		return nil, nil
	}
	var r Stored
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Expires <= s.now().Unix() {
		return nil, nil
	}
	return &r, nil
}

func (s *MemoryStore) Finish(ctx context.Context, owner, id string, response json.RawMessage) error {
	r, err := s.Get(ctx, owner, id)
	if err != nil || r == nil {
		return err
	}
	r.Response = response
	return s.Put(ctx, owner, r)
}

func (s *MemoryStore) Delete(_ context.Context, owner, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := storeKey(owner, id)
	b, ok := s.m[k]
	if ok {
		s.held -= len(b)
		delete(s.m, k)
	}
	return ok, nil
}

// DynamoStore is Store in the requests table: one item per response, its
// key apart from the request records' (resp#<owner>#<id>), expiring with
// the table's TTL.
type DynamoStore struct {
	table *dynamotable.Table
	now   func() time.Time
}

const (
	attrDoc     = "response_doc"
	attrExpires = "expires_at"
)

// NewDynamoStore returns Store on the requests table.
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{table: dynamotable.NewTable(client, table, dynamotable.TableRequests), now: time.Now}
}

// SetObserver reports every call (ops response_put, response_get, ...) to obs.
func (d *DynamoStore) SetObserver(obs dynamotable.Observer) { d.table.SetObserver(obs) }

func (d *DynamoStore) Put(ctx context.Context, owner string, r *Stored) error {
	b, err := encodeStored(r)
	if err != nil {
		return err
	}
	item := dynamotable.Item{dynamotable.PK: dynamotable.S(storeKey(owner, r.ID)), attrDoc: dynamotable.B(b),
		attrExpires: dynamotable.N(r.Expires)}
	return d.table.Put(ctx, "response_put", item, "", nil, nil)
}

func (d *DynamoStore) Get(ctx context.Context, owner, id string) (*Stored, error) {
	item, err := d.table.Get(ctx, "response_get", storeKey(owner, id), true)
	if err != nil || item == nil {
		return nil, err
	}
	var r Stored
	if err := json.Unmarshal(dynamotable.Bytes(item, attrDoc), &r); err != nil {
		return nil, fmt.Errorf("stored response %s: %w", id, err)
	}
	if r.Expires <= d.now().Unix() {
		return nil, nil
	}
	return &r, nil
}

func (d *DynamoStore) Finish(ctx context.Context, owner, id string, response json.RawMessage) error {
	r, err := d.Get(ctx, owner, id)
	if err != nil || r == nil {
		return err
	}
	r.Response = response
	return d.Put(ctx, owner, r)
}

func (d *DynamoStore) Delete(ctx context.Context, owner, id string) (bool, error) {
	err := d.table.Delete(ctx, "response_delete", storeKey(owner, id), "attribute_exists(#pk)",
		map[string]string{"#pk": dynamotable.PK}, nil)
	if _, refused := dynamotable.Refused(err); refused {
		return false, nil
	}
	return err == nil, err
}

func storeKey(owner, id string) string { return "resp#" + owner + "#" + id }
