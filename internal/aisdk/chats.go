package aisdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// Chats maps a user's chat id to the request id of the chat's latest
// response, for as long as that response can be resumed. It is durable
// (the requests table) so a resume on any server finds it.
type Chats interface {
	// Latest is the chat's latest response, zero when it has none.
	Latest(ctx context.Context, owner, chatID string) (Response, error)
	// Claim makes r the chat's latest response if its latest is still
	// the request prev ("": none), until expires; ErrChatMoved if
	// another response claimed the chat meanwhile.
	Claim(ctx context.Context, owner, chatID, prev string, r Response, expires time.Time) error
}

// Response is a chat's response: its core request and the UI message it
// streams (a new one, or the assistant message a client tool's output
// continues).
type Response struct {
	RequestID string
	MessageID string
}

// ErrChatMoved is a claim that lost: the chat has a newer response.
var ErrChatMoved = errors.New("the chat has a newer response")

// MemoryChats is Chats in this process (dev mode, and a gateway with no
// requests table: its requests are resumable only here too).
type MemoryChats struct {
	mu    sync.Mutex
	chats map[string]memoryChat
	now   func() time.Time
}

type memoryChat struct {
	Response
	expires time.Time
}

// memoryChatsBound bounds the chats a MemoryChats keeps: past it, the
// expired ones are dropped, then the claim is refused as a busy store.
const memoryChatsBound = 100_000

// NewMemoryChats returns an empty MemoryChats.
func NewMemoryChats() *MemoryChats {
	return &MemoryChats{chats: map[string]memoryChat{}, now: time.Now}
}

func (m *MemoryChats) Latest(_ context.Context, owner, chatID string) (Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.chats[chatKey(owner, chatID)]
	if !ok || !m.now().Before(c.expires) {
		return Response{}, nil
	}
	return c.Response, nil
}

func (m *MemoryChats) Claim(_ context.Context, owner, chatID, prev string, r Response, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := chatKey(owner, chatID)
	now := m.now()
	cur, ok := m.chats[k]
	if ok && !now.Before(cur.expires) {
		ok = false
	}
	if (ok && cur.RequestID != prev) || (!ok && prev != "") {
		return ErrChatMoved
	}
	if !ok && len(m.chats) >= memoryChatsBound {
		for key, c := range m.chats {
			if !now.Before(c.expires) {
				delete(m.chats, key)
			}
		}
		if len(m.chats) >= memoryChatsBound {
			return fmt.Errorf("chat index: %d chats held in memory (its bound)", memoryChatsBound)
		}
	}
	m.chats[k] = memoryChat{Response: r, expires: expires}
	return nil
}

// DynamoChats is Chats in the requests table: one item per chat, its key
// apart from the request records' (chat#<owner>#<chat id>), expiring with
// the table's TTL.
type DynamoChats struct {
	table *dynamotable.Table
	now   func() time.Time
}

// The chat item's attributes (the key and the TTL attribute are the
// requests table's).
const (
	attrLatest  = "latest_request_id"
	attrMessage = "message_id"
	attrExpires = "expires_at"
)

// NewDynamoChats returns Chats on the requests table.
func NewDynamoChats(client *dynamodb.Client, table string) *DynamoChats {
	return &DynamoChats{table: dynamotable.NewTable(client, table, dynamotable.TableRequests), now: time.Now}
}

// SetObserver reports every call (ops chat_get, chat_claim) to obs.
func (d *DynamoChats) SetObserver(obs dynamotable.Observer) { d.table.SetObserver(obs) }

func (d *DynamoChats) Latest(ctx context.Context, owner, chatID string) (Response, error) {
	item, err := d.table.Get(ctx, "chat_get", chatKey(owner, chatID), true)
	if err != nil {
		return Response{}, err
	}
	if item == nil || expired(item, d.now()) {
		return Response{}, nil
	}
	return Response{RequestID: dynamotable.String(item, attrLatest), MessageID: dynamotable.String(item, attrMessage)}, nil
}

func (d *DynamoChats) Claim(ctx context.Context, owner, chatID, prev string, r Response, expires time.Time) error {
	item := dynamotable.Item{
		dynamotable.PK: dynamotable.S(chatKey(owner, chatID)),
		attrLatest:     dynamotable.S(r.RequestID),
		attrMessage:    dynamotable.S(r.MessageID),
		attrExpires:    dynamotable.N(expires.Unix()),
	}
	names := map[string]string{"#pk": dynamotable.PK, "#exp": attrExpires}
	values := dynamotable.Item{":now_s": dynamotable.N(d.now().Unix())}
	cond := "attribute_not_exists(#pk) OR #exp <= :now_s"
	if prev != "" {
		// The latest may also have expired meanwhile: it is then gone.
		names["#latest"] = attrLatest
		values[":prev"] = dynamotable.S(prev)
		cond = "attribute_not_exists(#pk) OR #exp <= :now_s OR #latest = :prev"
	}
	err := d.table.Put(ctx, "chat_claim", item, cond, names, values)
	if _, refused := dynamotable.Refused(err); refused {
		return ErrChatMoved
	}
	return err
}

func expired(item dynamotable.Item, now time.Time) bool {
	n, ok := dynamotable.Int(item, attrExpires)
	return ok && n <= now.Unix()
}

func chatKey(owner, chatID string) string { return "chat#" + owner + "#" + chatID }
