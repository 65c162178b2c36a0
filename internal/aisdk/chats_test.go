package aisdk

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// Both stores keep one latest response per user's chat: a claim wins only
// over the latest it names, another user's chat is apart, an expired
// latest is none, and of racing claims exactly one wins.
func TestChatsContract(t *testing.T) {
	ctx := context.Background()
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	table := dynalitetest.TableName(t)
	if err := stream.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	for name, chats := range map[string]Chats{"memory": NewMemoryChats(), "dynamodb": NewDynamoChats(client, table)} {
		t.Run(name, func(t *testing.T) {
			later := time.Now().Add(time.Hour)
			if id, err := chats.Latest(ctx, "t/a/alice", "chat-0001"); err != nil || id != (Response{}) {
				t.Fatalf("an unknown chat: %q %v", id, err)
			}
			if err := chats.Claim(ctx, "t/a/alice", "chat-0001", "", Response{RequestID: "req-1", MessageID: "m-req-1"}, later); err != nil {
				t.Fatal(err)
			}
			if err := chats.Claim(ctx, "t/a/alice", "chat-0001", "", Response{RequestID: "req-x", MessageID: "m-req-x"}, later); !errors.Is(err, ErrChatMoved) {
				t.Fatalf("a claim over a latest it did not name: %v", err)
			}
			if err := chats.Claim(ctx, "t/a/alice", "chat-0001", "req-1", Response{RequestID: "req-2", MessageID: "m-req-2"}, later); err != nil {
				t.Fatal(err)
			}
			if id, _ := chats.Latest(ctx, "t/a/alice", "chat-0001"); id != (Response{RequestID: "req-2", MessageID: "m-req-2"}) {
				t.Fatalf("latest %q, want req-2", id)
			}
			if id, _ := chats.Latest(ctx, "t/a/bob", "chat-0001"); id != (Response{}) {
				t.Fatalf("another user's chat: %q", id)
			}
			if err := chats.Claim(ctx, "t/a/alice", "chat-gone1", "", Response{RequestID: "req-3", MessageID: "m-req-3"}, time.Now().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			if id, _ := chats.Latest(ctx, "t/a/alice", "chat-gone1"); id != (Response{}) {
				t.Fatalf("an expired chat: %q", id)
			}
			var wins, losses int
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					err := chats.Claim(ctx, "t/a/alice", "chat-race1", "", Response{RequestID: "req-r" + string(rune('0'+i))}, later)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, ErrChatMoved):
						losses++
					default:
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if wins != 1 || losses != 7 {
				t.Fatalf("8 racing claims: %d won, %d lost", wins, losses)
			}
		})
	}
}
