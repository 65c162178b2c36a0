package gatewaytest

import (
	"strings"
	"testing"
)

func TestWatchFindsListeningAndKeepsLines(t *testing.T) {
	out := `{"level":"info","msg":"starting"}
not json: kept as text
{"level":"info","msg":"listening","addr":"127.0.0.1:1","admin_addr":"127.0.0.1:2"}
{"level":"info","msg":"completed","request_id":"r1"}
{"level":"info","msg":"completed","request_id":"r2"}
`
	var l Log
	listening, ended := l.Watch(strings.NewReader(out))
	a := AwaitListening(t, "test", listening, &l)
	<-ended
	if a.Addr != "127.0.0.1:1" || a.Admin != "127.0.0.1:2" || a.URL() != "ws://127.0.0.1:1/v1/ws" {
		t.Fatalf("addrs %+v", a)
	}
	if n := len(l.Find("completed", "")); n != 2 {
		t.Fatalf("%d completed lines, want 2", n)
	}
	if n := len(l.Find("completed", "r2")); n != 1 {
		t.Fatalf("%d completed lines for r2, want 1", n)
	}
	if !strings.Contains(l.String(), "not json: kept as text") {
		t.Fatalf("log lost a line:\n%s", l.String())
	}
}

func TestWatchEndsWithoutListening(t *testing.T) {
	var l Log
	listening, ended := l.Watch(strings.NewReader(`{"msg":"config error"}` + "\n"))
	<-ended
	if _, ok := <-listening; ok {
		t.Fatal("listening yielded addresses for output without a listening line")
	}
}
